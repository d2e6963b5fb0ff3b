// A one-method service: the RPC layer's floor, served by thriftpy2's stock server.
service Echo {
  string echo(1: string s),
}
