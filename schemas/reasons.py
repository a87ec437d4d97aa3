"""Reason codes a record carries into quarantine: part of the contract, so consumers can count them."""

EMPTY_VALUE = "empty_value"                        # no value bytes at all (a tombstone or an empty record)
INVALID_ENCODING = "invalid_encoding"              # value bytes are not UTF-8
MALFORMED_JSON = "malformed_json"                  # not a JSON document the parser accepts (syntax, a repeated
                                                   # key, nesting deeper than 1000 levels)
TRAILING_DATA = "trailing_data"                    # a JSON document followed by more bytes, or several documents
WRONG_TYPE = "wrong_type"                          # the document, or a field, is not of its declared JSON type
MISSING_FIELD = "missing_field"                    # a required field is absent or null
OUT_OF_RANGE = "out_of_range"                      # a number does not fit its declared type
BAD_TIMESTAMP = "bad_timestamp"                    # a timestamp field is not an ISO-8601 instant
IMPLAUSIBLE_EVENT_TIME = "implausible_event_time"  # event time before the floor or too far ahead of the broker's clock
IMPLAUSIBLE_TIMESTAMP = "implausible_timestamp"    # another timestamp field outside the same plausible range
CONTRACT_VIOLATION = "contract_violation"          # well-formed, but breaks a business rule of the schema

ALL = (
    EMPTY_VALUE, INVALID_ENCODING, MALFORMED_JSON, TRAILING_DATA, WRONG_TYPE, MISSING_FIELD, OUT_OF_RANGE,
    BAD_TIMESTAMP, IMPLAUSIBLE_EVENT_TIME, IMPLAUSIBLE_TIMESTAMP, CONTRACT_VIOLATION,
)
