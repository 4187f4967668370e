// Framed, authenticated TCP connections between workers and parameter servers.
//
// Wire format: every frame is  u32 length (little endian, of type + payload) | u8 type |
// payload | 16-byte Poly1305 tag.  Frames are sent on one persistent connection per
// worker-PS pair with TCP_NODELAY (requests are small and latency-bound).
//
// Dead peers: a peer whose machine dies (node lost, network cut) sends no FIN or RST, and a
// blocked Receive would wait for ever (data it sent would be retried for ~15 minutes).
// Every connection, dialled or accepted, has TCP keepalive and TCP_USER_TIMEOUT set so a
// peer that stops acknowledging is declared gone within kDeadPeerTimeout: Send or Receive
// then fail with Unavailable, and the caller reconnects (rpc/remote_params.h) or drops the peer.
// A live peer that is slow to answer (a synchronous-mode barrier waiting for a restarted
// worker) is not affected: its kernel keeps acknowledging.
//
// Authentication handshake (libsodium), run before any other frame:
//   Flow:
//     1. server -> client  CHALLENGE  ns (32 random bytes)
//     2. client -> server  RESPONSE   nc (32 random bytes), HMAC-SHA256(K, "kt1 client" ns nc)
//     3. server verifies (constant time); on failure it logs the peer and closes.
//        server -> client  ACCEPT     HMAC-SHA256(K, "kt1 server" nc ns)
//     4. client verifies, so a process without the key cannot pose as a PS either.
//     Both sides derive one key per direction: HMAC-SHA256(K, "kt1 c2s"|"kt1 s2c" ns nc).
//   Guarantees: only holders of K complete the handshake. A recorded handshake cannot be
//     replayed: the proof is bound to the other side's fresh nonce. After the handshake,
//     every frame carries a Poly1305 tag under a one-time key derived (ChaCha20) from the
//     direction key and the frame's sequence number, so frames cannot be forged,
//     modified, replayed, reordered or moved between connections or directions.
//   Assumptions: K is 32 uniformly random bytes (the operator generates it per job).
//     Frames are authenticated, not encrypted: parameters are not secret in-cluster.
//
// A Connection is used by one thread at a time (not thread-safe); it owns its fd.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"

namespace kubetrain::trainer {

using AuthKey = std::array<unsigned char, 32>;

// How long a peer may leave data or keepalive probes unacknowledged before its
// connection fails (see "Dead peers" above).
inline constexpr std::chrono::milliseconds kDeadPeerTimeout{20000};

// Accepts 64 hex digits or base64 (standard or URL-safe, padded or not) of 32 bytes;
// surrounding whitespace is ignored (Secrets often end with a newline).
StatusOr<AuthKey> ParseAuthKey(std::string_view text);

class Connection {
 public:
  explicit Connection(int fd, std::string peer);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Runs the handshake. Errors: Unauthenticated (wrong key / bad proof), Unavailable (I/O).
  Status AuthenticateAsClient(const AuthKey& key);
  Status AuthenticateAsServer(const AuthKey& key);

  // Sends one frame; `payload` may be given in two parts to avoid a copy of large arrays.
  Status Send(uint8_t type, std::string_view payload, std::string_view payload2 = {});
  // Receives one frame. Errors: Unavailable (closed / I/O), Unauthenticated (bad tag),
  // InvalidArgument (frame too large).
  Status Receive(uint8_t* type, std::string* payload);

  // Unblocks any thread in Send/Receive (used to stop a server).
  void Shutdown();
  const std::string& peer() const { return peer_; }
  // The socket, for inspection (socket options); the Connection keeps owning it.
  int native_handle() const { return fd_; }

 private:
  Status SendRaw(const void* data, size_t n);
  Status RecvRaw(void* data, size_t n);
  void Tag(const std::array<unsigned char, 32>& dir_key, uint64_t seq, const unsigned char* head,
           std::string_view a, std::string_view b, unsigned char* tag) const;

  const int fd_;
  const std::string peer_;
  bool authenticated_ = false;
  std::array<unsigned char, 32> send_key_{}, recv_key_{};
  uint64_t send_seq_ = 0, recv_seq_ = 0;
};

// Resolves host:port and connects, giving up after `timeout` for this attempt.
StatusOr<std::unique_ptr<Connection>> Dial(const std::string& host, int port,
                                           std::chrono::milliseconds timeout);

class Listener {
 public:
  // Listens on all addresses (IPv6 dual-stack if available), port 0 = any free port.
  static StatusOr<std::unique_ptr<Listener>> Listen(int port);
  ~Listener();
  int port() const { return port_; }
  // Blocks for the next connection. Errors as for AcceptFor().
  StatusOr<std::unique_ptr<Connection>> Accept();
  // Waits at most `timeout` for the next connection; nullptr when none came. Errors:
  // Unavailable after Close(); ResourceExhausted when the process or the system is out of
  // descriptors or memory (transient: the pending connection is closed at once with a
  // reserved descriptor, so it neither stays queued nor makes the caller spin); Internal
  // for errors that do not go away (a broken listening socket). Aborted connections and
  // network errors the kernel reports through accept() are skipped, not returned.
  StatusOr<std::unique_ptr<Connection>> AcceptFor(std::chrono::milliseconds timeout);
  void Close();

 private:
  Listener(int fd, int port);
  std::atomic<int> fd_;  // -1 once closed; Close() may race with Accept()
  const int port_;
  std::atomic<int> spare_fd_;  // a reserved descriptor given up to shed a connection at EMFILE
};

// Frame types. The handshake uses 1-3; requests and replies use the rest, with
// the payloads of trainer/rpc/protocol.h.
enum FrameType : uint8_t {
  kChallenge = 1,
  kResponse = 2,
  kAccept = 3,
  kHello = 10,
  kPull = 11,
  kPullReply = 12,
  kPush = 13,
  kCheckpoint = 14,
  kDone = 15,
  kDoneReply = 16,
  kShutdown = 17,
  kOk = 18,
  kError = 19,
};

}  // namespace kubetrain::trainer
