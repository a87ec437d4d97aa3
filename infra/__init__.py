"""What runs underneath: settings, JVM jars, the Kafka broker, the Spark session."""
