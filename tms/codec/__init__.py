"""Pure codecs (bytes <-> values): table keys, table values, and later the wire formats."""
