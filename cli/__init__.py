"""The `lakehouse` command: its subcommands, the demo, and the progress and reports they print."""
