package lakehouse.serving;

import java.util.Locale;
import java.util.regex.Pattern;

import org.apache.spark.SparkThrowable;
import org.apache.spark.sql.SparkSessionExtensions;
import org.apache.spark.sql.catalyst.expressions.CallMethodViaReflection;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.plans.logical.Command;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.execution.command.SetCommand;
import scala.Function1;
import scala.runtime.BoxedUnit;

/**
 * A Spark session extension that refuses every statement that would change the lake, when the server
 * was started with spark.lakehouse.readOnly=true (a static setting: no SET of a client can lift it).
 *
 * <p>It is the JVM twin of serving/sql.py's refuse_writes, for servers whose statements never pass through
 * Python (the Thrift JDBC/ODBC server). It checks the analyzed plan: every Spark command is a write unless
 * it only describes, lists, explains or sets a session option, and reflect/java_method are refused because
 * they call any JVM method.
 */
public final class ReadOnlyGuard implements Function1<SparkSessionExtensions, BoxedUnit> {

    public static final String SETTING = "spark.lakehouse.readOnly";
    // The server's own session sets this runtime option to the token in its environment (OWNER_TOKEN), so that it
    // can register tables and run flows; a client can set any option of its own session (Spark Connect's config
    // call is not SQL), but cannot read the server's environment, so only the token lifts the guard.
    public static final String OWNER = "spark.lakehouse.readOnly.owner";
    public static final String OWNER_TOKEN = "LAKEHOUSE_READ_ONLY_OWNER_TOKEN";

    // Commands that read or only touch the client's own session.
    private static final Pattern READS = Pattern.compile(
        "^(Describe|Show|Explain|SetCommand$|ResetCommand$|SetNamespace|SetCatalog|DescribeDelta)");
    // Python run on the server (a Spark Connect client's UDFs, mapInPandas, applyInArrow...): it could do anything.
    private static final Pattern PYTHON = Pattern.compile("Python|Pandas|Arrow");
    // Plans that write without being a Command in every Spark version (statements resolved later).
    private static final Pattern WRITES = Pattern.compile(
        "Insert|Restore|Clone|Convert|Merge|Delete|Update|Write|Drop|Create|Alter|Truncate|Vacuum|Optimize|Reorg");

    @Override
    public BoxedUnit apply(SparkSessionExtensions extensions) {
        extensions.injectCheckRule(session -> {
            boolean readOnly = "true".equalsIgnoreCase(session.sparkContext().conf().get(SETTING, "false"));
            String token = System.getenv(OWNER_TOKEN);
            Function1<LogicalPlan, BoxedUnit> rule = plan -> {
                boolean owner = token != null && token.length() >= 16 && token.equals(session.conf().get(OWNER, ""));
                if (readOnly && !owner) {
                    refuseWrites(plan);
                }
                return BoxedUnit.UNIT;
            };
            return rule;
        });
        return BoxedUnit.UNIT;
    }

    static void refuseWrites(LogicalPlan plan) {
        plan.foreach(node -> {
            String name = node.getClass().getSimpleName();
            if (node instanceof SetCommand && ((SetCommand) node).kv().isDefined()
                    && ((SetCommand) node).kv().get()._1().startsWith("spark.lakehouse.")) {
                throw new ReadOnlyViolation("this server's own settings cannot be changed by a client");
            }
            boolean reads = READS.matcher(name).find();
            if (!reads && (node instanceof Command || WRITES.matcher(name).find())) {
                throw new ReadOnlyViolation("this server is read-only and a " + verb(name)
                    + " would change the lake; tables are written only by their flows, backfills and maintenance commands");
            }
            if (PYTHON.matcher(name).find()) {
                throw new ReadOnlyViolation("this server is read-only and does not run Python code: a query may only read the tables");
            }
            node.expressions().foreach(expression -> {
                if (expression.find(e -> e instanceof CallMethodViaReflection).isDefined()) {
                    throw new ReadOnlyViolation("this server does not run reflect or java_method: a query may only read the tables");
                }
                if (expression.find(e -> PYTHON.matcher(e.getClass().getSimpleName()).find()).isDefined()) {
                    throw new ReadOnlyViolation("this server is read-only and does not run Python code: a query may only read the tables");
                }
                return BoxedUnit.UNIT;
            });
            return BoxedUnit.UNIT;
        });
    }

    private static String verb(String planName) {
        String bare = planName.replaceAll("(Command|Statement|Table|Exec)$", "");
        return bare.isEmpty() ? "statement" : bare.replaceAll("([a-z])([A-Z])", "$1 $2").toUpperCase(Locale.ROOT) + " statement";
    }

    /** A statement this server refuses; its message is the whole explanation (SQLSTATE 42501: not permitted). */
    public static final class ReadOnlyViolation extends RuntimeException implements SparkThrowable {
        ReadOnlyViolation(String message) {
            super(message.substring(0, 1).toUpperCase(Locale.ROOT) + message.substring(1) + ".", null, false, false);
        }

        @Override
        public String toString() {
            return getMessage();   // what a client shows after the condition: the sentence, not the class
        }

        @Override
        public String getCondition() {
            return "LAKEHOUSE_READ_ONLY";
        }

        @Override
        public String getSqlState() {
            return "42501";
        }
    }
}
