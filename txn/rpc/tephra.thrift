/*
 * The wire contract of Apache Tephra's transaction service (Tephra 0.16 IDL), written for
 * txms from the published facts: same type names, field ids, method names, argument ids
 * and declared exceptions, so clients generated from Tephra's own IDL interoperate.
 * Served over TFramedTransport + TBinaryProtocol, non-multiplexed. Methods after pruneNow
 * are txms extensions; Tephra's clients never call them.
 */

namespace java org.apache.tephra.distributed.thrift
namespace py txn.rpc.gen

enum TTransactionType {
  SHORT = 1,
  LONG = 2
}

enum TVisibilityLevel {
  SNAPSHOT = 1,
  SNAPSHOT_EXCLUDE_CURRENT = 2,
  SNAPSHOT_ALL = 3
}

struct TTransaction {
  1: i64 transactionId,
  2: i64 readPointer,
  3: list<i64> invalids,
  4: list<i64> inProgress,
  5: i64 firstShort,
  6: TTransactionType type,
  7: i64 writePointer,
  8: list<i64> checkpointWritePointers,
  9: TVisibilityLevel visibilityLevel
}

exception TTransactionConflictException {
  1: i64 transactionId,
  2: string conflictingKey,
  3: string conflictingClient
}

exception TTransactionNotInProgressException {
  1: string message
}

exception TTransactionCouldNotTakeSnapshotException {
  1: string message
}

exception TInvalidTruncateTimeException {
  1: string message
}

exception TGenericException {
  1: string message,
  2: string originalExceptionClass
}

// Wraps a boolean result (a workaround for THRIFT-1474).
struct TBoolean {
  1: bool value
}

// txms extension, not in Tephra (see writePointerState).
struct TWritePointerState {
  1: i64 writePointer,
  2: list<i64> inProgress,
  3: list<i64> invalid
}

service TTransactionServer {
  TTransaction startLong(),
  TTransaction startShort(),
  TTransaction startLongClientId(1: string clientId) throws (1: TGenericException e),
  TTransaction startShortTimeout(1: i32 timeout),
  TTransaction startShortClientId(1: string clientId) throws (1: TGenericException e),
  TTransaction startShortWithClientIdAndTimeOut(1: string clientId, 2: i32 timeout)
      throws (1: TGenericException e),
  TTransaction startShortWithTimeout(1: i32 timeout) throws (1: TGenericException e),
  TBoolean canCommitTx(1: TTransaction tx, 2: set<binary> changes)
      throws (1: TTransactionNotInProgressException e),
  void canCommitOrThrow(1: i64 tx, 2: set<binary> changes)
      throws (1: TTransactionNotInProgressException e,
              2: TTransactionConflictException c,
              3: TGenericException g),
  TBoolean commitTx(1: TTransaction tx) throws (1: TTransactionNotInProgressException e),
  void commitOrThrow(1: i64 txId, 2: i64 wp)
      throws (1: TTransactionNotInProgressException e,
              2: TTransactionConflictException c,
              3: TGenericException g),
  void abortTx(1: TTransaction tx),
  bool invalidateTx(1: i64 tx),
  binary getSnapshot() throws (1: TTransactionCouldNotTakeSnapshotException e),
  void resetState(),
  string status(),
  TBoolean truncateInvalidTx(1: set<i64> txns),
  TBoolean truncateInvalidTxBefore(1: i64 time) throws (1: TInvalidTruncateTimeException e),
  i32 invalidTxSize(),
  TTransaction checkpoint(1: TTransaction tx) throws (1: TTransactionNotInProgressException e),
  void pruneNow(),

  // txms extension, not in Tephra: a pruning participant in another process reports the
  // largest id up to which no invalid transaction has data in its store (txn.prune).
  // A name the server is not configured with: TGenericException (IllegalArgumentException).
  void reportPruneUpperBound(1: string participant, 2: i64 bound)
      throws (1: TGenericException g),

  // txms extension, not in Tephra: read-only. The newest write pointer issued, every
  // write pointer in progress (checkpoints included), and which of writePointers are
  // invalid. For services that refuse writes under pointers the manager did not issue
  // (answered at once). durable (absent: false): answered only once every edit appended
  // before the state was read is durable, so a pointer it shows finished stays finished
  // after a crash (for readers deciding what is committed).
  TWritePointerState writePointerState(1: list<i64> writePointers, 2: optional bool durable),

  // txms's extension (not Tephra's): a lease on a short transaction. It expires `timeout`
  // seconds from now (never sooner than before, never past the manager's maximum
  // lifetime); returns the new expiration in ms of the server's clock.
  i64 extendTimeout(1: i64 tx, 2: i32 timeout)
      throws (1: TTransactionNotInProgressException e, 2: TGenericException g),
}
