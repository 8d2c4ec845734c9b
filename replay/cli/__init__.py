"""Command line: thin subcommands that parse, call the library and print."""
