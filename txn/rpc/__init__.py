"""Tephra's Thrift protocol: server, client and the conversions between them."""
