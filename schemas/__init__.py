"""Contracts: topic specs, versioned event schemas, table specs, quarantine reason codes."""
