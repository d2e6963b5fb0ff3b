// The bodies of txms's binary protocol (docs/rpc.md): each frame's body is one of these
// structs in Thrift's binary protocol (no message envelope: the frame header carries the
// operation and the request id). Fields are numbered for good; new fields get new ids.
//
// Message lists are columnar (one list of ids, one of payloads): a list<binary> is read
// and written in one C loop by thriftpy2, a list of structs is not.

struct Error {
  1: string code      // the error code of the REST API ("topic_not_found", ...)
  2: string message
  3: optional string owner  // not_owner: the owner's binary address (tms://host:port)
}

// op 0, the first request of every connection
struct Hello {
  1: i32 version            // 1
  2: optional string token  // the bearer token, when the service authenticates
  3: optional string client_id
}

struct Welcome {
  1: i32 version
  2: i32 max_frame_bytes
  3: i32 max_in_flight      // requests per connection the server reads before it waits
  4: i32 idle_timeout_ms    // a connection quiet this long (nothing in flight) is closed
  5: i32 http_port          // the REST API (admin operations), 0 when unknown
  6: bool http_tls
  7: optional string principal
}

struct RollbackRange {
  1: i64 write_pointer
  2: i64 start_ms
  3: i32 start_seq
  4: i64 end_ms
  5: i32 end_seq
}

// op 1 publish, op 2 store
struct PublishRequest {
  1: string ns
  2: string topic
  3: optional i64 write_pointer
  4: list<binary> payloads
  5: optional list<i32> ttls   // one per payload, seconds; 0 = the topic's TTL
}

struct PublishResponse {
  1: optional RollbackRange rollback   // a transactional publish's rollback token
}

struct Empty {}

// op 3
struct RollbackRequest {
  1: string ns
  2: string topic
  3: RollbackRange rollback
}

struct RollbackResponse {
  1: i32 rolled_back
}

// op 4
struct MarkersRequest {
  1: string ns
  2: string topic
  3: list<i64> write_pointers
  4: optional string idempotency_key
}

struct MarkersResponse {
  1: list<RollbackRange> markers
  2: bool duplicate
}

// op 5 poll, op 6 bounds (limit and wait_ms do not apply)
struct PollRequest {
  1: string ns
  2: string topic
  3: optional binary start_id         // a 20-byte message id
  4: optional i64 start_ms            // or a time; neither: the oldest message
  5: optional bool inclusive          // default true
  6: optional i32 limit
  7: optional binary transaction      // Tephra's TransactionCodec bytes
  8: optional i32 wait_ms             // long-poll
}

struct PollResponse {
  1: list<binary> ids        // 20 bytes each
  2: list<binary> payloads   // payloads[i] is the message with ids[i]
  3: bool held
}

struct Position {
  1: i64 publish_ms
  2: i32 seq
}

struct BoundsResponse {
  1: optional Position first
  2: optional Position last
  3: optional Position held
}

// op 7: lease up to max due messages of a queue (docs/queues.md); no long-poll here
struct ReceiveRequest {
  1: string ns
  2: string topic
  3: i32 max
  4: optional i32 lease_ms        // default: the queue's lease_s
  5: optional i32 wait_ms         // long-poll: wait up to this long for a ready message
}

// columnar, like PollResponse: message i is ids[i], payloads[i], attempts[i], ...
struct ReceiveResponse {
  1: list<binary> ids             // 10 bytes each
  2: list<binary> payloads
  3: list<i32> attempts
  4: list<i64> due_ms
  5: list<i64> lease_expires_ms
  6: list<i64> enqueued_ms
  7: list<i32> priorities
  8: list<string> keys            // "" for none
}

// op 8: ack deliveries (receipt i is ids[i] with attempts[i])
struct AckRequest {
  1: string ns
  2: string topic
  3: list<binary> ids
  4: list<i32> attempts
  5: optional i64 write_pointer   // acked when that transaction commits
}

struct AckResponse {
  1: list<string> outcomes        // "acked", "pending", "lease_lost", "unknown", ...
}

// op 9 subscription poll: read from a subscription's position (or from `start`)
struct SubPollRequest {
  1: string ns
  2: string topic
  3: string name                      // the subscription
  4: optional binary start            // a 20-byte position: read from here, inclusive
  5: optional i32 limit               // default 1000, at most 10000
  6: optional binary transaction      // Tephra's TransactionCodec bytes
  7: optional i32 wait_ms             // long-poll
  8: optional i64 commit_version      // commit `start` with this version before reading
  9: optional bool reread             // when what holds it finishes, read what finished
  10: optional bool commit_later      // answer before the commit's write is durable
}

struct SubPollResponse {
  1: list<binary> ids
  2: list<binary> payloads
  3: bool held
  4: bool held_finished               // the transaction it is held behind has finished
  5: binary start                     // where it read from
  6: binary position                  // where the next read starts: commit it
  7: i64 version                      // the subscription's version, to commit with
  8: optional bool fresh              // read with what finished (reread): read on and
                                      // commit with a transaction started after it
  9: optional string read_error       // the read failed after the commit riding on it
                                      // was written (its error code): no messages;
                                      // position and version are the commit's
  10: optional string read_error_message
  11: optional i64 durable_version    // the version known durable when answered (absent:
                                      // `version`); a commit that gave a version above
                                      // it may still be lost
}

// op 10 subscription commit: move the position forward (not transactionally)
struct SubCommitRequest {
  1: string ns
  2: string topic
  3: string name
  4: binary position                  // a 20-byte position
  5: i64 version                      // the version read
  6: optional binary transaction      // the reader's (a transactional subscription)
}

struct SubscriptionState {
  1: i64 version
  2: binary position
  3: optional i64 committed_by        // the write pointer whose position it is
  4: i64 updated_ms
  5: i64 generation
  6: string preferences               // docs/http.md's Preferences object, JSON
}

// op 11 subscription position write: as part of `transaction` (SubCommitRequest's
// transaction required), it becomes the position when that transaction commits
struct PositionWritten {
  1: i64 write_pointer
}

// op 12 enqueue: message i is payloads[i] with keys[i], delays_ms[i], ... (each list
// optional: absent means every message has the default)
struct EnqueueRequest {
  1: string ns
  2: string topic
  3: list<binary> payloads
  4: optional list<string> keys       // "" for none: unique in the queue (idempotent)
  5: optional list<i64> delays_ms     // deliver not before this long after it arrives
  6: optional list<i64> at_ms         // deliver not before this time (ms); -1 for none
  7: optional list<i32> priorities    // lower first among due messages; default 0
  8: optional i64 write_pointer       // pending until that transaction commits
}

struct EnqueueResponse {
  1: list<binary> ids                 // 10 bytes each, one per message
  2: list<bool> duplicates            // its key was in the queue: the first message's id
}

// op 13 nack: return deliveries (receipt i is ids[i] with attempts[i])
struct NackRequest {
  1: string ns
  2: string topic
  3: list<binary> ids
  4: list<i32> attempts
  5: optional i64 delay_ms            // due again after this; absent: the back-off
}

// op 14 settle: a transaction's outcome for its pending enqueues and acks in a queue
struct SettleRequest {
  1: string ns
  2: string topic
  3: i64 write_pointer
  4: bool commit
}

struct SettleResponse {
  1: i32 settled                      // pending enqueues and acks it settled
}
