#include "kvstore/kv_transfer.h"

#include <poll.h>
#include <ucp/api/ucp.h>

#include <cstring>
#include <unordered_map>
#include <vector>

namespace tp {
namespace {

constexpr uint64_t kKvRequestTag = 0x4b56524551000000ULL;  // "KVREQ" in the high bytes
constexpr uint64_t kKvReplyTagBase = 0x4b56525000000000ULL;
constexpr uint32_t kRequestMagic = 0x5152564b;  // "KVRQ"
constexpr uint32_t kReplyMagic = 0x5052564b;    // "KVRP"
constexpr uint32_t kWireVersion = 1;
constexpr uint32_t kMaxRequestBlocks = 1u << 20;
constexpr uint32_t kMaxAddressBytes = 1u << 16;
constexpr uint32_t kMaxErrorBytes = 1024;

enum ReplyStatus : int32_t { kOk = 0, kMalformed = 1, kLayoutMismatch = 2, kBadBlock = 3 };

struct RequestHeader {
  uint32_t magic, version;
  uint64_t request_id, reply_tag, fingerprint;
  uint32_t n_blocks, address_bytes;
};
struct ReplyHeader {
  uint32_t magic;
  int32_t status;
  uint64_t request_id;
  uint32_t n_blocks, error_bytes;
  uint64_t block_bytes;
};

uint64_t mix(uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  return h;
}

std::string to_hex(const uint8_t* p, size_t n) {
  static const char* d = "0123456789abcdef";
  std::string s(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    s[2 * i] = d[p[i] >> 4];
    s[2 * i + 1] = d[p[i] & 15];
  }
  return s;
}

std::vector<uint8_t> from_hex(const std::string& s) {
  auto nibble = [&](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    throw KvTransferError("KV transfer: holder address is not hex (character '" + std::string(1, c) + "')");
  };
  if (s.empty() || s.size() % 2 != 0 || s.size() > 2 * size_t(kMaxAddressBytes))
    throw KvTransferError("KV transfer: holder address has " + std::to_string(s.size()) +
                          " hex digits (expected an even count in [2, " + std::to_string(2 * kMaxAddressBytes) + "])");
  std::vector<uint8_t> out(s.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) out[i] = uint8_t(nibble(s[2 * i]) << 4 | nibble(s[2 * i + 1]));
  return out;
}

void check_ucs(ucs_status_t st, const char* what) {
  if (st != UCS_OK) throw KvTransferError(std::string("KV transfer: ") + what + ": " + ucs_status_string(st));
}

template <class T>
void put(std::vector<uint8_t>& buf, const T& v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  buf.insert(buf.end(), p, p + sizeof(T));
}

void on_ep_error(void* arg, ucp_ep_h, ucs_status_t) { static_cast<std::atomic<bool>*>(arg)->store(true); }

// Waits (progressing `w`) until `req` completes; returns its status (UCS_OK for an immediate completion).
ucs_status_t wait_request(ucp_worker_h w, void* req) {
  if (req == nullptr) return UCS_OK;
  if (UCS_PTR_IS_ERR(req)) return UCS_PTR_STATUS(req);
  ucs_status_t st;
  while ((st = ucp_request_check_status(req)) == UCS_INPROGRESS) ucp_worker_progress(w);
  ucp_request_free(req);
  return st;
}

}  // namespace

uint64_t block_checksum(uint64_t chain_hash, std::span<const uint8_t> bytes) {
  uint64_t h = mix(chain_hash ^ 0x9e3779b97f4a7c15ULL) ^ uint64_t(bytes.size()) * 0xc2b2ae3d27d4eb4fULL;
  const size_t n_words = bytes.size() / 8;
  for (size_t i = 0; i < n_words; ++i) {
    uint64_t w;
    std::memcpy(&w, bytes.data() + 8 * i, 8);
    h = (h ^ w) * 0x100000001b3ULL;  // a bijection of h for every w: each word changes the result
    h ^= h >> 29;
  }
  for (size_t i = 8 * n_words; i < bytes.size(); ++i) h = (h ^ bytes[i]) * 0x100000001b3ULL;
  return mix(h);
}

uint64_t pool_fingerprint(const KvPoolShape& s) {
  uint64_t h = 0x6b76706f6f6cULL;
  for (int64_t v : {int64_t(s.dtype), s.block_size, s.n_kv_heads, s.head_dim, s.n_layers, int64_t(s.tensor_scales),
                    s.block_bytes()})
    h = mix(h ^ uint64_t(v));
  return h;
}

void pack_blocks(KvPool& pool, std::span<const int32_t> blocks, std::span<uint8_t> out) {
  const KvPoolShape& s = pool.shape();
  const int64_t bb = s.layout().block_bytes();
  if (int64_t(out.size()) != int64_t(blocks.size()) * s.block_bytes())
    throw Error("pack_blocks: output of " + std::to_string(out.size()) + " bytes for " + std::to_string(blocks.size()) +
                " blocks of " + std::to_string(s.block_bytes()));
  uint8_t* dst = out.data();
  for (int32_t b : blocks) {
    if (b < 0 || b >= s.n_blocks) throw Error("pack_blocks: block " + std::to_string(b) + " is outside the pool");
    for (int64_t l = 0; l < s.n_layers; ++l) {
      std::memcpy(dst, pool.k(l).block(b), size_t(bb));
      std::memcpy(dst + bb, pool.v(l).block(b), size_t(bb));
      dst += 2 * bb;
    }
  }
}

void unpack_blocks(KvPool& pool, std::span<const int32_t> blocks, std::span<const uint8_t> in) {
  const KvPoolShape& s = pool.shape();
  const int64_t bb = s.layout().block_bytes();
  if (int64_t(in.size()) != int64_t(blocks.size()) * s.block_bytes())
    throw Error("unpack_blocks: input of " + std::to_string(in.size()) + " bytes for " + std::to_string(blocks.size()) +
                " blocks of " + std::to_string(s.block_bytes()));
  const uint8_t* src = in.data();
  for (int32_t b : blocks) {
    if (b < 0 || b >= s.n_blocks) throw Error("unpack_blocks: block " + std::to_string(b) + " is outside the pool");
    for (int64_t l = 0; l < s.n_layers; ++l) {
      std::memcpy(pool.k(l).block(b), src, size_t(bb));
      std::memcpy(pool.v(l).block(b), src + bb, size_t(bb));
      src += 2 * bb;
    }
  }
}

struct KvTransferAgent::Ucx {
  ucp_context_h context = nullptr;
  ucp_worker_h server = nullptr;  // the progress thread's
  ucp_worker_h client = nullptr;  // fetch()'s (under fetch_mu_)
  std::vector<uint8_t> client_address;
  int server_fd = -1;
  // fetch()'s endpoints, one per holder address, kept for the agent's life: the holder answers over the endpoint
  // it made back to us, and a large (rendezvous) reply pairs with ours — closing ours after each fetch made every
  // later large reply fail. Dropped (force-closed) when a fetch over it fails.
  struct ClientEp {
    ucp_ep_h ep = nullptr;
    std::unique_ptr<std::atomic<bool>> failed = std::make_unique<std::atomic<bool>>(false);
  };
  std::unordered_map<std::string, ClientEp> client_eps;

  void close_client_ep(const std::string& address) {
    auto it = client_eps.find(address);
    if (it == client_eps.end()) return;
    ucp_request_param_t cp{};
    cp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    cp.flags = UCP_EP_CLOSE_FLAG_FORCE;
    wait_request(client, ucp_ep_close_nbx(it->second.ep, &cp));
    client_eps.erase(it);
  }

  ~Ucx() {
    while (!client_eps.empty()) close_client_ep(client_eps.begin()->first);
    if (client) ucp_worker_destroy(client);
    if (server) ucp_worker_destroy(server);
    if (context) ucp_cleanup(context);
  }
};

KvTransferAgent::KvTransferAgent(KvPool& pool, KvTransferOptions options)
    : pool_(pool), options_(options), ucx_(std::make_unique<Ucx>()) {
  if (!pool.host()) throw Error("KV transfer: the KV pool is not host memory (device pools are not served yet)");
  ucp_config_t* config = nullptr;
  check_ucs(ucp_config_read(nullptr, nullptr, &config), "ucp_config_read");
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
  params.mt_workers_shared = 1;
  const ucs_status_t st = ucp_init(&params, config, &ucx_->context);
  ucp_config_release(config);
  check_ucs(st, "ucp_init");
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;
  check_ucs(ucp_worker_create(ucx_->context, &wp, &ucx_->server), "ucp_worker_create (holder)");
  check_ucs(ucp_worker_create(ucx_->context, &wp, &ucx_->client), "ucp_worker_create (fetcher)");
  for (auto [w, out] : {std::pair{ucx_->server, (std::vector<uint8_t>*)nullptr},
                        std::pair{ucx_->client, &ucx_->client_address}}) {
    ucp_address_t* addr = nullptr;
    size_t len = 0;
    check_ucs(ucp_worker_get_address(w, &addr, &len), "ucp_worker_get_address");
    if (out)
      out->assign(reinterpret_cast<uint8_t*>(addr), reinterpret_cast<uint8_t*>(addr) + len);
    else
      address_hex_ = to_hex(reinterpret_cast<uint8_t*>(addr), len);
    ucp_worker_release_address(w, addr);
  }
  check_ucs(ucp_worker_get_efd(ucx_->server, &ucx_->server_fd), "ucp_worker_get_efd");
  server_ = std::thread([this] { serve_loop(); });
}

KvTransferAgent::~KvTransferAgent() {
  stop_.store(true);
  if (ucx_->server) ucp_worker_signal(ucx_->server);
  if (server_.joinable()) server_.join();
}

void KvTransferAgent::serve_loop() {
  ucp_worker_h w = ucx_->server;
  struct PendingSend {
    void* req;
    std::vector<uint8_t> buf;
    std::string to;  // the fetcher's address (its endpoint in eps)
    std::chrono::steady_clock::time_point started;
  };
  // A reply the fetcher never takes (it timed out and dropped its endpoint) would stay in flight forever: past this,
  // its endpoint is force-closed, which completes the send with an error.
  constexpr auto kSendLimit = std::chrono::seconds(30);
  std::vector<PendingSend> sends;
  std::unordered_map<std::string, ucp_ep_h> eps;  // fetcher address -> endpoint
  std::vector<std::atomic<bool>*> ep_flags;
  std::vector<uint8_t> in;
  const KvPoolShape& shape = pool_.shape();
  const uint64_t fingerprint = pool_fingerprint(shape);

  auto reply = [&](const std::string& to, const RequestHeader& rq, int32_t status, const std::string& error,
                   std::span<const int32_t> blocks, std::span<const uint64_t> hashes) {
    std::vector<uint8_t> out;
    const std::string err = error.substr(0, kMaxErrorBytes);
    const int64_t n = status == kOk ? int64_t(blocks.size()) : 0;
    ReplyHeader h{kReplyMagic, status, rq.request_id, uint32_t(n), uint32_t(err.size()), uint64_t(shape.block_bytes())};
    put(out, h);
    const size_t sums_at = out.size();
    out.resize(sums_at + size_t(n) * 8, 0);
    out.insert(out.end(), err.begin(), err.end());
    const size_t data_at = out.size();
    if (n > 0) {
      out.resize(data_at + size_t(n * shape.block_bytes()));
      pack_blocks(pool_, blocks, std::span<uint8_t>(out.data() + data_at, size_t(n * shape.block_bytes())));
      for (int64_t i = 0; i < n; ++i) {
        const uint64_t sum = block_checksum(
            hashes[size_t(i)], std::span<const uint8_t>(out.data() + data_at + i * shape.block_bytes(),
                                                        size_t(shape.block_bytes())));
        std::memcpy(out.data() + sums_at + 8 * i, &sum, 8);
      }
      if (options_.corrupt_replies_for_test && shape.block_bytes() > 0) out[data_at] ^= 0x5a;
    }
    auto it = eps.find(to);
    if (it == eps.end()) {
      ucp_ep_params_t ep{};
      ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER;
      ep.address = reinterpret_cast<const ucp_address_t*>(to.data());
      ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
      ep_flags.push_back(new std::atomic<bool>(false));
      ep.err_handler.cb = on_ep_error;
      ep.err_handler.arg = ep_flags.back();
      ucp_ep_h h_ep = nullptr;
      if (ucp_ep_create(w, &ep, &h_ep) != UCS_OK) return;  // the fetcher times out
      it = eps.emplace(to, h_ep).first;
    }
    ucp_request_param_t p{};
    PendingSend s{nullptr, std::move(out), to, std::chrono::steady_clock::now()};
    void* req = ucp_tag_send_nbx(it->second, s.buf.data(), s.buf.size(), rq.reply_tag, &p);
    if (req == nullptr || UCS_PTR_IS_ERR(req)) {
      if (UCS_PTR_IS_ERR(req)) {  // a broken endpoint: forget it, the next request makes a new one
        ucp_request_param_t cp{};
        cp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
        cp.flags = UCP_EP_CLOSE_FLAG_FORCE;
        wait_request(w, ucp_ep_close_nbx(it->second, &cp));
        eps.erase(it);
      }
      return;
    }
    s.req = req;
    sends.push_back(std::move(s));
  };

  auto handle = [&](std::span<const uint8_t> msg) {
    RequestHeader rq{};
    if (msg.size() < sizeof rq) return;  // no reply address: nothing to answer
    std::memcpy(&rq, msg.data(), sizeof rq);
    if (rq.magic != kRequestMagic || rq.address_bytes == 0 || rq.address_bytes > kMaxAddressBytes ||
        msg.size() < sizeof rq + rq.address_bytes)
      return;
    const std::string from(reinterpret_cast<const char*>(msg.data() + sizeof rq), rq.address_bytes);
    const size_t need = sizeof rq + rq.address_bytes + size_t(rq.n_blocks) * 12;
    if (rq.version != kWireVersion || rq.n_blocks == 0 || rq.n_blocks > kMaxRequestBlocks || msg.size() != need)
      return reply(from, rq, kMalformed, "malformed KV fetch request (version, block count or size)", {}, {});
    if (rq.fingerprint != fingerprint)
      return reply(from, rq, kLayoutMismatch,
                   "KV pool layouts differ (dtype, block size, local KV heads, head dim or layers)", {}, {});
    std::vector<int32_t> blocks(rq.n_blocks);
    std::vector<uint64_t> hashes(rq.n_blocks);
    std::memcpy(blocks.data(), msg.data() + sizeof rq + rq.address_bytes, blocks.size() * 4);
    std::memcpy(hashes.data(), msg.data() + sizeof rq + rq.address_bytes + blocks.size() * 4, hashes.size() * 8);
    for (int32_t b : blocks)
      if (b < 0 || b >= shape.n_blocks)
        return reply(from, rq, kBadBlock, "block " + std::to_string(b) + " is outside the holder's pool of " +
                                              std::to_string(shape.n_blocks), {}, {});
    reply(from, rq, kOk, "", blocks, hashes);
    n_served_.fetch_add(1);
  };

  auto force_close = [&](const std::string& to) {
    auto it = eps.find(to);
    if (it == eps.end()) return;
    ucp_request_param_t cp{};
    cp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    cp.flags = UCP_EP_CLOSE_FLAG_FORCE;
    wait_request(w, ucp_ep_close_nbx(it->second, &cp));
    eps.erase(it);
  };
  while (!stop_.load()) {
    while (ucp_worker_progress(w) != 0) {
    }
    const auto now = std::chrono::steady_clock::now();
    for (size_t i = 0; i < sends.size();) {
      if (ucp_request_check_status(sends[i].req) != UCS_INPROGRESS) {
        ucp_request_free(sends[i].req);
        sends[i] = std::move(sends.back());
        sends.pop_back();
      } else {
        if (now - sends[i].started > kSendLimit) force_close(sends[i].to);
        ++i;
      }
    }
    ucp_tag_recv_info_t info{};
    ucp_tag_message_h m = ucp_tag_probe_nb(w, kKvRequestTag, ~uint64_t(0), 1, &info);
    if (m != nullptr) {
      in.resize(info.length);
      ucp_request_param_t p{};
      if (wait_request(w, ucp_tag_msg_recv_nbx(w, in.data(), in.size(), m, &p)) == UCS_OK) {
        try {
          handle(in);
        } catch (const std::exception&) {
          // a request this holder cannot serve (e.g. out of memory): the fetcher times out and recomputes
        }
      }
      continue;
    }
    if (ucp_worker_arm(w) == UCS_ERR_BUSY) continue;
    pollfd pfd{ucx_->server_fd, POLLIN, 0};
    ::poll(&pfd, 1, sends.empty() ? 50 : 1);  // replies in flight: look again soon (tcp progress is ours)
  }
  // Shutdown: force-close every endpoint (completing the sends on them), give the sends a second, then let go.
  while (!eps.empty()) force_close(eps.begin()->first);
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  for (PendingSend& s : sends) {
    while (ucp_request_check_status(s.req) == UCS_INPROGRESS && std::chrono::steady_clock::now() < give_up)
      ucp_worker_progress(w);
    ucp_request_free(s.req);  // released by UCX once complete, if it is not yet
  }
  for (auto* f : ep_flags) delete f;
}

KvFetchStats KvTransferAgent::fetch(const std::string& holder_address, std::span<const int32_t> holder_blocks,
                                    std::span<const int32_t> local_blocks, std::span<const uint64_t> chain_hashes,
                                    std::chrono::milliseconds timeout) {
  const auto t0 = std::chrono::steady_clock::now();
  const size_t n = holder_blocks.size();
  if (n == 0 || n != local_blocks.size() || n != chain_hashes.size() || n > kMaxRequestBlocks)
    throw KvTransferError("KV transfer: fetch of " + std::to_string(n) + " holder blocks into " +
                          std::to_string(local_blocks.size()) + " local blocks with " +
                          std::to_string(chain_hashes.size()) + " chain hashes");
  const KvPoolShape& shape = pool_.shape();
  for (int32_t b : local_blocks)
    if (b < 0 || b >= shape.n_blocks)
      throw KvTransferError("KV transfer: local block " + std::to_string(b) + " is outside the pool");
  if (holder_address == address_hex_)
    throw KvTransferError("KV transfer: an agent cannot fetch from its own holder worker (same ucp context)");
  const std::vector<uint8_t> remote = from_hex(holder_address);
  std::lock_guard<std::mutex> lock(fetch_mu_);
  ucp_worker_h w = ucx_->client;
  const uint64_t request_id = next_request_++;
  const uint64_t reply_tag = kKvReplyTagBase | (request_id & 0xffffffffULL);

  std::vector<uint8_t> req_buf;
  put(req_buf, RequestHeader{kRequestMagic, kWireVersion, request_id, reply_tag, pool_fingerprint(shape),
                             uint32_t(n), uint32_t(ucx_->client_address.size())});
  req_buf.insert(req_buf.end(), ucx_->client_address.begin(), ucx_->client_address.end());
  const auto* hb = reinterpret_cast<const uint8_t*>(holder_blocks.data());
  req_buf.insert(req_buf.end(), hb, hb + n * 4);
  const auto* hh = reinterpret_cast<const uint8_t*>(chain_hashes.data());
  req_buf.insert(req_buf.end(), hh, hh + n * 8);

  const size_t data_at = sizeof(ReplyHeader) + n * 8 + kMaxErrorBytes;
  std::vector<uint8_t> reply(data_at + n * size_t(shape.block_bytes()));

  auto cached = ucx_->client_eps.find(holder_address);
  if (cached == ucx_->client_eps.end()) {
    Ucx::ClientEp ce;
    ucp_ep_params_t ep{};
    ep.field_mask =
        UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.address = reinterpret_cast<const ucp_address_t*>(remote.data());
    ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    ep.err_handler.cb = on_ep_error;
    ep.err_handler.arg = ce.failed.get();
    ucs_status_t st = ucp_ep_create(w, &ep, &ce.ep);
    if (st == UCS_ERR_UNREACHABLE) {
      // Seen now and then on this machine (UCX 1.13, loopback): no lane with peer-failure support was found. Without
      // it, a dead holder is still caught by the timeout (and the force-close after it).
      ep.field_mask &= ~uint64_t(UCP_EP_PARAM_FIELD_ERR_HANDLER);
      ep.err_mode = UCP_ERR_HANDLING_MODE_NONE;
      st = ucp_ep_create(w, &ep, &ce.ep);
    }
    check_ucs(st, "connecting to the holder (ucp_ep_create)");
    cached = ucx_->client_eps.emplace(holder_address, std::move(ce)).first;
  }
  ucp_ep_h h_ep = cached->second.ep;
  std::atomic<bool>& ep_failed = *cached->second.failed;

  ucp_request_param_t rp{};
  rp.op_attr_mask = UCP_OP_ATTR_FIELD_RECV_INFO;
  ucp_tag_recv_info_t recv_info{};
  rp.recv_info.tag_info = &recv_info;
  void* recv_req = ucp_tag_recv_nbx(w, reply.data(), reply.size(), reply_tag, ~uint64_t(0), &rp);
  ucp_request_param_t sp{};
  void* send_req = ucp_tag_send_nbx(h_ep, req_buf.data(), req_buf.size(), kKvRequestTag, &sp);

  std::string failure;
  const auto deadline = t0 + timeout;
  auto done = [](void* r) { return r == nullptr || UCS_PTR_IS_ERR(r) || ucp_request_check_status(r) != UCS_INPROGRESS; };
  while (failure.empty() && !(done(recv_req) && done(send_req))) {
    ucp_worker_progress(w);
    if (ep_failed.load()) failure = "the connection to the holder failed (holder dead or unreachable)";
    else if (std::chrono::steady_clock::now() > deadline)
      failure = "no reply from the holder within " + std::to_string(timeout.count()) + " ms";
  }
  size_t received = reply.size();
  if (failure.empty()) {
    if (UCS_PTR_IS_ERR(send_req)) failure = std::string("sending the request: ") + ucs_status_string(UCS_PTR_STATUS(send_req));
    else if (send_req && ucp_request_check_status(send_req) != UCS_OK)
      failure = std::string("sending the request: ") + ucs_status_string(ucp_request_check_status(send_req));
    else if (UCS_PTR_IS_ERR(recv_req)) failure = std::string("receiving the reply: ") + ucs_status_string(UCS_PTR_STATUS(recv_req));
    else if (recv_req && ucp_request_check_status(recv_req) != UCS_OK)
      failure = std::string("receiving the reply: ") + ucs_status_string(ucp_request_check_status(recv_req));
    else if (recv_req)
      ucp_tag_recv_request_test(recv_req, &recv_info);  // the length of a completion that was not immediate
    if (failure.empty()) received = recv_info.length;
  }
  // Release everything before deciding: cancel what is still in flight; after a failure, drop the endpoint (its
  // force-close completes the send in flight).
  if (recv_req && !UCS_PTR_IS_ERR(recv_req)) {
    if (ucp_request_check_status(recv_req) == UCS_INPROGRESS) ucp_request_cancel(w, recv_req);
    wait_request(w, recv_req);
  }
  if (!failure.empty()) ucx_->close_client_ep(holder_address);
  if (send_req && !UCS_PTR_IS_ERR(send_req)) wait_request(w, send_req);
  if (!failure.empty()) throw KvTransferError("KV transfer: " + failure);

  ReplyHeader h{};
  if (received < sizeof h) throw KvTransferError("KV transfer: reply of " + std::to_string(received) + " bytes is truncated");
  std::memcpy(&h, reply.data(), sizeof h);
  if (h.magic != kReplyMagic || h.request_id != request_id)
    throw KvTransferError("KV transfer: the reply is not an answer to this request");
  if (h.status != kOk) {
    const size_t at = sizeof h + size_t(h.n_blocks) * 8;
    std::string err = h.error_bytes <= kMaxErrorBytes && at + h.error_bytes <= received
                          ? std::string(reinterpret_cast<const char*>(reply.data() + at), h.error_bytes)
                          : std::string("(no message)");
    throw KvTransferError("KV transfer: the holder refused the request: " + err);
  }
  if (h.n_blocks != n || h.block_bytes != uint64_t(shape.block_bytes()) || h.error_bytes != 0)
    throw KvTransferError("KV transfer: the reply has " + std::to_string(h.n_blocks) + " blocks of " +
                          std::to_string(h.block_bytes) + " bytes; asked for " + std::to_string(n) + " of " +
                          std::to_string(shape.block_bytes()));
  const size_t got_data_at = sizeof h + n * 8;
  const size_t data_bytes = n * size_t(shape.block_bytes());
  if (received != got_data_at + data_bytes)
    throw KvTransferError("KV transfer: reply of " + std::to_string(received) + " bytes, expected " +
                          std::to_string(got_data_at + data_bytes));
  const uint8_t* data = reply.data() + got_data_at;
  for (size_t i = 0; i < n; ++i) {
    uint64_t sum;
    std::memcpy(&sum, reply.data() + sizeof h + 8 * i, 8);
    const uint64_t mine =
        block_checksum(chain_hashes[i], std::span<const uint8_t>(data + i * size_t(shape.block_bytes()), size_t(shape.block_bytes())));
    if (mine != sum)
      throw KvTransferError("KV transfer: block " + std::to_string(i) + " (holder block " +
                            std::to_string(holder_blocks[i]) + ") fails its checksum against chain hash " +
                            std::to_string(chain_hashes[i]));
  }
  unpack_blocks(pool_, local_blocks, std::span<const uint8_t>(data, data_bytes));
  KvFetchStats stats;
  stats.n_blocks = int64_t(n);
  stats.bytes = int64_t(data_bytes);
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return stats;
}

}  // namespace tp
