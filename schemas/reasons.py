"""Reason codes a record carries into quarantine: part of the contract, so consumers can count them."""

INVALID_ENCODING = "invalid_encoding"      # value bytes are not UTF-8
MALFORMED_JSON = "malformed_json"          # value is not a JSON document
MISSING_FIELD = "missing_field"            # a required field is absent, null or of the wrong type
BAD_TIMESTAMP = "bad_timestamp"            # a timestamp field is not an ISO-8601 instant
CONTRACT_VIOLATION = "contract_violation"  # well-formed, but breaks a business rule of the schema

ALL = (INVALID_ENCODING, MALFORMED_JSON, MISSING_FIELD, BAD_TIMESTAMP, CONTRACT_VIOLATION)
