#pragma once

// The C ABI of the cubed client (libcubed_client_c.so): the C++ SDK (client/client.h) behind
// opaque handles, for SDKs of other languages. The Python SDK loads it with ctypes
// (client/python/cubed_client/_native.py).
//
// Note [One client core]
// The session stream's protocol (proto/cubed/v1/session.proto: client ids, seqs, batching, the
// command ring, replies matched to commands, deadlines, resume, bulk transfers) is implemented
// once, by the C++ SDK. A binding does not speak it: it builds the stream's Commands (a
// session.proto `Command`, serialized, its `seq` unset; a binding that has protobuf builds them
// as before, or encodes them by hand) and hands their bytes to cubed_client_send, which queues
// them on the C++ StreamTransport in the order sent. What crosses this ABI:
//   * Opaque handles: a cubed_client (one session), a cubed_reply (the answer of one command).
//     Each is created by this library and freed by the caller with its free function, once.
//   * Errors: every fallible function returns a status code (google.rpc.Code / grpc::StatusCode
//     numbers: 0 OK, 3 INVALID_ARGUMENT, 9 FAILED_PRECONDITION, 14 UNAVAILABLE, ...), and when
//     `error` is not NULL and the code is not 0, fills it with the code and a message the caller
//     frees with cubed_error_clear. Bindings map the codes to their exceptions (Python: the
//     CubedError subclasses). A reply's own failure (the daemon's code and message, a sync's
//     failed-command count) comes from cubed_reply_status.
//   * Bytes: inputs (a command, a create's data) are read during the call only; the library
//     copies what it keeps. Outputs (a reply's bytes, a read's data) are owned by the cubed_reply
//     and stay valid until cubed_reply_free; the caller copies them out.
//   * Threads: every function may be called from any thread, and none calls back into the
//     caller: replies arrive on the C++ SDK's reader thread, which only stores them and wakes
//     whoever waits. A binding either waits for one reply (cubed_reply_wait, blocking the
//     calling thread, no other thread involved: the 4-byte read path), or asks to be told
//     (cubed_reply_notify) and takes the tags of such replies, as they complete, from
//     cubed_client_next_done on a thread of its own (the Python SDK's futures with callbacks).
//     Only replies asked for are queued there, so answers someone waits for wake no other
//     thread. A notified reply can still be waited for: the binding claims each reply once
//     (Python: popping it from a dict) and ignores the other way it heard of it.
//   * Blocking calls (connect, create, wait, next_done, close) release nothing of the caller's:
//     a binding with a global lock (Python's GIL) drops it around them (ctypes does for CDLL).
// Versioning: cubed_connect_options starts with its own size, and CUBED_C_API_VERSION grows with
// every change; cubed_c_api_version() says which one the library implements.

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CUBED_C_API_VERSION 3

#if defined(__GNUC__)
#define CUBED_C_EXPORT __attribute__((visibility("default")))
#else
#define CUBED_C_EXPORT
#endif

// The version of this ABI the library implements (CUBED_C_API_VERSION when it was built).
CUBED_C_EXPORT int32_t cubed_c_api_version(void);

// A failure: `code` as the function returned, `message` (NUL-terminated, malloc'ed, NULL when
// code is 0) owned by the caller until cubed_error_clear.
typedef struct cubed_error {
  int32_t code;
  char* message;
} cubed_error;

// Frees `error`'s message and zeroes it. NULL is a no-op.
CUBED_C_EXPORT void cubed_error_clear(cubed_error* error);

// How to connect (cubed::ClientOptions of client/client.h, field for field). Fill it with
// cubed_connect_options_init, then set what differs. Strings are read during connect only;
// NULL or "" means "none".
typedef struct cubed_connect_options {
  uint32_t struct_size;         // sizeof(cubed_connect_options); set by _init.
  const char* address;          // "unix:/path/cubed.sock" or "host:port"; required.
  int64_t timeout_ms;           // Deadline of each call and of each reply; > 0.
  uint32_t device;              // Device to open the session on.
  int64_t lease_ms;             // Session lease; 0 = the daemon's default.
  int64_t max_message_bytes;    // Largest message sent or received; 1 .. 2^31 - 1.
  const char* token;            // Bearer token.
  const char* tls_ca_file;      // TLS: PEM file of the CA of the daemon's certificate.
  const char* tls_cert_file;    // mTLS: this client's certificate chain (PEM file).
  const char* tls_key_file;     // mTLS: its key (PEM file).
  const char* tls_server_name;  // Name the daemon's certificate is checked against.
  uint64_t session;             // Join this session (unary transport) instead of opening one.
  int32_t transport;            // 0: the session stream; 1: unary calls.
  int32_t carrier;              // 0: auto; 1: the command ring (or fail); 2: gRPC.
  uint64_t bulk_threshold;      // Creates of this many bytes or more go over Upload; 0 never.
  uint64_t bulk_chunk;          // Their chunk size, 1 byte .. 4 MiB.
  uint64_t region_threshold;    // Creates through a staging region from here; 0 never.
  int64_t resume_timeout_ms;    // Resume the stream after a checkpointed restart; 0 never.
  int64_t reply_spin_us;        // Polling before a wait sleeps (ClientOptions::reply_spin):
                                // < 0 the daemon's suggestion, 0 never, at most 1000000.
  uint32_t bulk_lanes;          // Connections one bulk transfer may use at once, 1 .. 16;
                                // 0 = by this host's cores (ClientOptions::bulk_lanes).
} cubed_connect_options;

// The C++ SDK's defaults (cubed::ClientOptions), address NULL, struct_size set.
CUBED_C_EXPORT void cubed_connect_options_init(cubed_connect_options* options);

typedef struct cubed_client cubed_client;
// The answer of one command (or unary call): see cubed_reply_create.
typedef struct cubed_reply cubed_reply;

// Connects and opens a session (cubed::Client::Connect; the environment variables
// CUBED_CLIENT_TRANSPORT and CUBED_CLIENT_CARRIER apply as there). Turns Abseil's mutex deadlock
// detection off for the process (a debug aid on in Debian's Abseil; docs/api.md, "Abseil's
// lock-order graph"): a host program that uses Abseil itself sees that setting. On success
// *client is a new client the caller ends with cubed_client_close and frees with
// cubed_client_free. Errors: INVALID_ARGUMENT (a NULL or bad option, naming it), UNAVAILABLE (no
// daemon), the daemon's.
CUBED_C_EXPORT int32_t cubed_client_connect(const cubed_connect_options* options,
                                            cubed_client** client, cubed_error* error);

// Closes the session (as cubed::Client's destructor: the daemon runs what was sent, then frees
// the session; waits up to the timeout) and fails the replies still awaited with the stream's
// end. Wakes cubed_client_next_done. Idempotent. Afterwards only cubed_client_next_done,
// cubed_client_free and the cubed_reply functions may be called.
CUBED_C_EXPORT void cubed_client_close(cubed_client* client);

// Ends the session stream at once from this side (Client::CancelStream), from any thread:
// replies still awaited complete with CANCELLED, later calls fail with the stream's end, and the
// daemon closes the session and frees its memory. cubed_client_close is still due. No-op on
// unary calls or once closed.
CUBED_C_EXPORT void cubed_client_cancel(cubed_client* client);

// Closes `client` when not closed, waits for calls still inside cubed_client_next_done to
// return, and frees it. NULL is a no-op. Replies outlive it.
CUBED_C_EXPORT void cubed_client_free(cubed_client* client);

// The session id; the lease the daemon granted, ms (0 for a joined session).
CUBED_C_EXPORT uint64_t cubed_client_session(const cubed_client* client);
CUBED_C_EXPORT int64_t cubed_client_lease_ms(const cubed_client* client);
// Microseconds a wait for a reply polls before it sleeps (Client::reply_spin(): Note [Waiting
// awake] in client/client.h).
CUBED_C_EXPORT int64_t cubed_client_reply_spin_us(const cubed_client* client);
// 0: the session stream; 1: unary calls (cubed_connect_options.transport after the environment
// and joining applied).
CUBED_C_EXPORT int32_t cubed_client_transport(const cubed_client* client);
// What carries the stream: 1 the command ring, 2 gRPC (2 for unary calls too).
CUBED_C_EXPORT int32_t cubed_client_carrier(const cubed_client* client);

// With resume_timeout_ms: how many times the stream resumed so far (*resumes) and whether a
// resume is in progress now (*resuming, 0 or 1: the daemon ended the stream and the SDK tries to
// take the session back). Zeros without the session stream or once closed.
CUBED_C_EXPORT void cubed_client_resume_state(cubed_client* client, uint64_t* resumes,
                                              int32_t* resuming);

// One unary RPC of the daemon on the client's own channel (the daemon its session lives on, with
// its token and TLS): `method` its full name ("/cubed.v1.Compute/GetInfo"), `request` the
// serialized request (`size` bytes). Blocks up to the timeout. On success `reply` (fresh, as for
// cubed_client_send) is complete with the serialized response as its data entry 0; otherwise the
// call's code and message (the method's name first), and `reply` stays unused.
CUBED_C_EXPORT int32_t cubed_client_call(cubed_client* client, const char* method,
                                         const void* request, size_t size, cubed_reply* reply,
                                         cubed_error* error);

// A fresh client id of the session stream (the id a binding puts in a create / empty /
// create_tensor / empty_tensor it builds). FAILED_PRECONDITION on unary calls or once closed.
CUBED_C_EXPORT int32_t cubed_client_next_id(cubed_client* client, uint64_t* id, cubed_error* error);

// A new reply for one answering command, not sent yet: pass it to cubed_client_send (or
// cubed_client_read / cubed_client_sync), once; `tag` is what cubed_client_next_done gives for
// it. Created before the send so that a binding can file it where the answer will look for it
// before the answer can come. Freed by the caller (cubed_reply_free), sent or not.
CUBED_C_EXPORT cubed_reply* cubed_reply_create(uint64_t tag);

// Queues the serialized session.proto Command `command` (`size` bytes, its seq unset) on the
// session stream behind everything sent before. A command that answers (read, read_tensor, sync,
// memory_usage, end_profile, end_graph, create_tensor, empty_tensor) needs `reply`, a fresh
// cubed_reply_create one, which then completes with its answer; other commands need NULL.
// INVALID_ARGUMENT for bytes that are not a Command, a Command with nothing set, a bulk transfer
// (those need cubed_client_create), a reply where none comes or none where one does, a reply
// used before; FAILED_PRECONDITION on unary calls or once closed; the stream's error once it
// ended. On failure `reply` stays unused.
CUBED_C_EXPORT int32_t cubed_client_send(cubed_client* client, const void* command, size_t size,
                                         cubed_reply* reply, cubed_error* error);

// trait: create. Stores the `size` bytes at `data` (1 byte or more; read during the call only)
// and sets *id to the new handle's id, which the caller releases (cubed_client_release). Goes
// through the C++ SDK's Client::Create: inline, or in chunks over Upload from
// bulk_threshold bytes (then it returns once every byte is on the daemon, with the daemon's
// error), or through a staging region from region_threshold bytes. On the stream, other errors
// of the create (a full pool) surface at the next read or sync of the handle.
CUBED_C_EXPORT int32_t cubed_client_create(cubed_client* client, const void* data, uint64_t size,
                                           uint64_t* id, cubed_error* error);

// trait: empty. *id: a handle of `size` (>= 1) uninitialized bytes, released by the caller.
CUBED_C_EXPORT int32_t cubed_client_empty(cubed_client* client, uint64_t size, uint64_t* id,
                                          cubed_error* error);

// trait: execute. `command` is a serialized Command whose `execute` is set (kernel, count,
// bindings, mode: what the Python SDK builds); INVALID_ARGUMENT otherwise. Returns once queued;
// kernel errors poison the outputs and come back from the next sync and their reads.
CUBED_C_EXPORT int32_t cubed_client_execute(cubed_client* client, const void* command, size_t size,
                                            cubed_error* error);

// A prepared launch (Note [Prepared C ABI launches] in cubed_client_c_launch.cc): the fixed parts
// of an Execute sent many times with other buffers and scalars, checked once. Not tied to a client:
// any client and any thread may send it; freed by cubed_launch_free after its last send returned.
typedef struct cubed_launch cubed_launch;

// Prepares `execute` (`size` bytes): a serialized cubed.v1.Command.Execute with its kernel,
// count, mode and the metadata of its bindings, and neither buffers nor scalars. *launch gets
// the prepared launch (NULL on error). INVALID_ARGUMENT when the bytes do not parse as one, it
// has no kernel, or its bindings hold buffers or scalars. Any thread.
CUBED_C_EXPORT int32_t cubed_launch_prepare(const void* execute, size_t size, cubed_launch** launch,
                                            cubed_error* error);
CUBED_C_EXPORT void cubed_launch_free(cubed_launch* launch);

// trait: execute, prepared: sends `launch` on the session stream with `count` buffers
// (`buffers`: 3 * count u64, each buffer's handle, offset_start and offset_end as in
// cubed.v1.Binding) and `scalars` (`scalars_size` bytes, may be empty: a serialized
// cubed.v1.Bindings holding scalars only) as the one Execute they make, as cubed_client_send
// would send it, and as fast as the library can frame it. Returns once queued; no reply: kernel
// errors poison the outputs and come back from the next sync and their reads (as for
// cubed_client_execute). INVALID_ARGUMENT for scalars that are not such a Bindings, more than
// 2^20 buffers (the daemon refuses more than 64) or NULL pointers; FAILED_PRECONDITION on the
// unary transport or a closed client. Thread-safe, as cubed_client_send.
CUBED_C_EXPORT int32_t cubed_client_send_launch(cubed_client* client, const cubed_launch* launch,
                                                const uint64_t* buffers, size_t count,
                                                const void* scalars, size_t scalars_size,
                                                cubed_error* error);

// Releases one reference of each of the `count` handles `ids`, behind the commands sent before.
// count 0 is a no-op. On the stream unknown ids fail at the next sync; on unary calls the
// releases are sent now and their first error returned.
CUBED_C_EXPORT int32_t cubed_client_release(cubed_client* client, const uint64_t* ids, size_t count,
                                            cubed_error* error);

// trait: read. Queues a read of handle `id` without `offset_start` bytes at the front and
// `offset_end` at the back; `reply` (fresh, as for cubed_client_send) completes with one data
// entry (cubed_reply_data), or the error that read (or the command that poisoned the handle)
// failed with.
CUBED_C_EXPORT int32_t cubed_client_read(cubed_client* client, uint64_t id, uint64_t offset_start,
                                         uint64_t offset_end, cubed_reply* reply,
                                         cubed_error* error);

// trait: read, waited for: reads handle `id` as cubed_client_read does, waits up to
// `timeout_ms` (< 0: without end) on this thread, polling first (Note [Waiting awake] in
// client/client.h), and copies the bytes into `out` (`capacity` bytes; *size gets how many).
// For small reads: no reply object, one call. A read of `capacity` >= the client's
// bulk_threshold (and, where region_threshold is not 0, below it) is downloaded straight into
// `out` in bulk lanes (cubed::Client::ReadInto) instead of coming as one reply message; it
// waits until its bytes are in or it failed (the download's deadline is the client's timeout
// plus 1 s per 64 MiB), whatever `timeout_ms` says, so that nothing lands in `out` after the
// call returns. Errors: the
// read's (as cubed_reply_status gives them); OUT_OF_RANGE when the bytes do not fit `capacity`
// (nothing copied); DEADLINE_EXCEEDED when no answer came in time (the read may still run).
CUBED_C_EXPORT int32_t cubed_client_read_into(cubed_client* client, uint64_t id,
                                              uint64_t offset_start, uint64_t offset_end, void* out,
                                              uint64_t capacity, uint64_t* size, int64_t timeout_ms,
                                              cubed_error* error);

// trait: read, into the caller's memory, not waited for: queues a read of handle `id` (as
// cubed_client_read) whose bytes land in `out` (`capacity` bytes): a bulk read (capacity >=
// bulk_threshold on the stream) is downloaded straight into it in lanes (cubed::Client::
// ReadInto), any other read copied in once it is there. `reply` (fresh) completes once every
// byte is in `out` or the read failed, never before nothing more can be written to `out`: keep
// `out` valid and unread until then. On success cubed_reply_read_size gives how many bytes were
// written; errors as cubed_client_read's, OUT_OF_RANGE when they do not fit `capacity`. Uses a
// thread until the reply completes: for large reads.
CUBED_C_EXPORT int32_t cubed_client_read_into_async(cubed_client* client, uint64_t id,
                                                    uint64_t offset_start, uint64_t offset_end,
                                                    void* out, uint64_t capacity,
                                                    cubed_reply* reply, cubed_error* error);
// The bytes cubed_client_read_into_async wrote; 0 before `reply` completed or for other replies.
CUBED_C_EXPORT uint64_t cubed_reply_read_size(const cubed_reply* reply);

// trait: flush.
CUBED_C_EXPORT int32_t cubed_client_flush(cubed_client* client, cubed_error* error);

// trait: sync. `reply` (fresh) completes once every earlier command ran; cubed_reply_status then
// gives the first failure since the previous sync and cubed_reply_failed_commands their count.
CUBED_C_EXPORT int32_t cubed_client_sync(cubed_client* client, cubed_reply* reply,
                                         cubed_error* error);

// trait: memory_usage of the session's device, waited for (up to the timeout), after every
// command sent before.
typedef struct cubed_memory_usage {
  uint64_t number_allocs;   // Live allocations.
  uint64_t bytes_in_use;    // Sum of their sizes, bytes.
  uint64_t bytes_padding;   // What the pools add to those sizes, bytes.
  uint64_t bytes_reserved;  // Bytes held from the storage.
} cubed_memory_usage;
CUBED_C_EXPORT int32_t cubed_client_memory_usage(cubed_client* client, cubed_memory_usage* usage,
                                                 cubed_error* error);

// Waits up to `timeout_ms` (< 0: without end) for the tag of a completed reply that
// cubed_reply_notify asked for, in the order they completed (or were asked for, when complete
// already), and sets *tag. 0 when one came; DEADLINE_EXCEEDED when none came in time;
// FAILED_PRECONDITION once the client is closed and every such tag was taken.
CUBED_C_EXPORT int32_t cubed_client_next_done(cubed_client* client, int64_t timeout_ms,
                                              uint64_t* tag, cubed_error* error);

// Asks that `reply`'s tag be given by cubed_client_next_done of the client it was sent on once
// it completed (now, when it has). Once per reply; later calls are no-ops, as is a reply never
// sent (it never completes).
CUBED_C_EXPORT void cubed_reply_notify(cubed_reply* reply);

// Waits up to `timeout_ms` (< 0: without end) for `reply`: 0 once it completed (with an answer
// or the stream's error: see cubed_reply_status), DEADLINE_EXCEEDED when it did not in time (it
// may still complete; the stream's own deadline resolves every reply eventually).
CUBED_C_EXPORT int32_t cubed_reply_wait(cubed_reply* reply, int64_t timeout_ms, cubed_error* error);

// (cubed_reply_wait polls the reply for the client's reply spin before it sleeps: Note [Waiting
// awake] in client/client.h.)
//
// Whether `reply` completed (no wait).
CUBED_C_EXPORT int32_t cubed_reply_done(const cubed_reply* reply);

// A completed reply's outcome: 0 when the command succeeded; otherwise its code, with `error`
// filled with the daemon's message (or the stream's error when no answer came). FAILED_PRECONDITION
// when it has not completed.
CUBED_C_EXPORT int32_t cubed_reply_status(const cubed_reply* reply, cubed_error* error);

// A sync's count of commands that failed since the previous sync (0 for other replies).
CUBED_C_EXPORT uint64_t cubed_reply_failed_commands(const cubed_reply* reply);

// The completed reply as a serialized session.proto Reply, its read data left out (see
// cubed_reply_data). *data is owned by `reply`. FAILED_PRECONDITION when not completed or when
// no answer came (the stream's error).
CUBED_C_EXPORT int32_t cubed_reply_bytes(cubed_reply* reply, const uint8_t** data, size_t* size,
                                         cubed_error* error);

// A read's data: the number of entries (one per binding; 0 for other replies), and entry
// `index`'s bytes, owned by `reply`. INVALID_ARGUMENT for an index past the end.
CUBED_C_EXPORT size_t cubed_reply_data_count(const cubed_reply* reply);
CUBED_C_EXPORT int32_t cubed_reply_data(const cubed_reply* reply, size_t index,
                                        const uint8_t** data, uint64_t* size, cubed_error* error);

// Frees `reply` (an answer still to come is dropped). NULL is a no-op.
CUBED_C_EXPORT void cubed_reply_free(cubed_reply* reply);

#ifdef __cplusplus
}  // extern "C"
#endif
