#include "kvstore/kv_event_wire.h"

#include <msgpack.h>

#include <memory>

#include "common/error.h"

namespace tp {
namespace {

struct Packer {
  msgpack_sbuffer buf;
  msgpack_packer pk;
  Packer() {
    msgpack_sbuffer_init(&buf);
    msgpack_packer_init(&pk, &buf, msgpack_sbuffer_write);
  }
  ~Packer() { msgpack_sbuffer_destroy(&buf); }
  void str(std::string_view s) {
    msgpack_pack_str(&pk, s.size());
    msgpack_pack_str_body(&pk, s.data(), s.size());
  }
  void hashes(const std::vector<uint64_t>& h) {
    msgpack_pack_array(&pk, h.size());
    for (uint64_t x : h) msgpack_pack_uint64(&pk, x);
  }
};

void pack_event(Packer& p, const KvEvent& e) {
  switch (e.kind) {
    case KvEventKind::BlockStored:
      msgpack_pack_array(&p.pk, 7);
      p.str("BlockStored");
      p.hashes(e.block_hashes);
      if (e.parent_block_hash) msgpack_pack_uint64(&p.pk, *e.parent_block_hash); else msgpack_pack_nil(&p.pk);
      msgpack_pack_array(&p.pk, e.token_ids.size());
      for (int32_t t : e.token_ids) msgpack_pack_int64(&p.pk, t);
      msgpack_pack_int64(&p.pk, e.block_size);
      if (e.lora_id) msgpack_pack_int64(&p.pk, *e.lora_id); else msgpack_pack_nil(&p.pk);
      p.str(e.medium);
      break;
    case KvEventKind::BlockRemoved:
      msgpack_pack_array(&p.pk, 3);
      p.str("BlockRemoved");
      p.hashes(e.block_hashes);
      p.str(e.medium);
      break;
    case KvEventKind::AllBlocksCleared:
      msgpack_pack_array(&p.pk, 1);
      p.str("AllBlocksCleared");
      break;
  }
}

[[noreturn]] void bad(const std::string& where, const std::string& what) {
  throw InputError("kv event batch: " + where + ": " + what);
}

const msgpack_object_array& array(const msgpack_object& o, const std::string& where) {
  if (o.type != MSGPACK_OBJECT_ARRAY) bad(where, "expected an array");
  return o.via.array;
}

bool is_nil(const msgpack_object& o) { return o.type == MSGPACK_OBJECT_NIL; }

int64_t integer(const msgpack_object& o, const std::string& where) {
  if (o.type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
    if (o.via.u64 > uint64_t(INT64_MAX)) bad(where, "integer out of range");
    return int64_t(o.via.u64);
  }
  if (o.type == MSGPACK_OBJECT_NEGATIVE_INTEGER) return o.via.i64;
  bad(where, "expected an integer");
}

uint64_t hash(const msgpack_object& o, const std::string& where) {
  if (o.type == MSGPACK_OBJECT_POSITIVE_INTEGER) return o.via.u64;
  if (o.type == MSGPACK_OBJECT_NEGATIVE_INTEGER) return uint64_t(o.via.i64);
  if (o.type == MSGPACK_OBJECT_BIN || o.type == MSGPACK_OBJECT_STR) {  // vLLM's bytes hashes
    const uint32_t n = o.type == MSGPACK_OBJECT_BIN ? o.via.bin.size : o.via.str.size;
    const char* p = o.type == MSGPACK_OBJECT_BIN ? o.via.bin.ptr : o.via.str.ptr;
    if (n == 0 || n > 8) bad(where, "a bytes hash must be 1 to 8 bytes, got " + std::to_string(n));
    uint64_t h = 0;
    for (uint32_t i = 0; i < n; ++i) h = (h << 8) | uint8_t(p[i]);
    return h;
  }
  bad(where, "expected a block hash (integer or bytes)");
}

std::string string(const msgpack_object& o, const std::string& where) {
  if (o.type != MSGPACK_OBJECT_STR) bad(where, "expected a string");
  return std::string(o.via.str.ptr, o.via.str.size);
}

std::vector<uint64_t> hashes(const msgpack_object& o, const std::string& where) {
  const auto& a = array(o, where);
  std::vector<uint64_t> h;
  for (uint32_t i = 0; i < a.size; ++i) h.push_back(hash(a.ptr[i], where + "[" + std::to_string(i) + "]"));
  return h;
}

KvEvent unpack_event(const msgpack_object& o, const std::string& where) {
  const auto& a = array(o, where);
  if (a.size == 0) bad(where, "an empty event (no tag)");
  const std::string tag = string(a.ptr[0], where + "[0]");
  auto need = [&](uint32_t n) {
    if (a.size < n) bad(where, tag + " needs " + std::to_string(n) + " elements, got " + std::to_string(a.size));
  };
  auto at = [&](uint32_t i) { return where + "[" + std::to_string(i) + "]"; };
  KvEvent e;
  if (tag == "BlockStored") {
    need(5);
    e.kind = KvEventKind::BlockStored;
    e.block_hashes = hashes(a.ptr[1], at(1));
    if (!is_nil(a.ptr[2])) e.parent_block_hash = hash(a.ptr[2], at(2));
    const auto& toks = array(a.ptr[3], at(3));
    for (uint32_t i = 0; i < toks.size; ++i) {
      const int64_t t = integer(toks.ptr[i], at(3) + "[" + std::to_string(i) + "]");
      if (t < 0 || t > INT32_MAX) bad(at(3) + "[" + std::to_string(i) + "]", "token id out of range");
      e.token_ids.push_back(int32_t(t));
    }
    const int64_t bs = integer(a.ptr[4], at(4));
    if (bs <= 0 || bs > (1 << 20)) bad(at(4), "block_size out of range");
    e.block_size = int32_t(bs);
    if (a.size > 5 && !is_nil(a.ptr[5])) e.lora_id = integer(a.ptr[5], at(5));
    e.medium = a.size > 6 && !is_nil(a.ptr[6]) ? string(a.ptr[6], at(6)) : "";
  } else if (tag == "BlockRemoved") {
    need(2);
    e.kind = KvEventKind::BlockRemoved;
    e.block_hashes = hashes(a.ptr[1], at(1));
    e.medium = a.size > 2 && !is_nil(a.ptr[2]) ? string(a.ptr[2], at(2)) : "";
  } else if (tag == "AllBlocksCleared") {
    e.kind = KvEventKind::AllBlocksCleared;
    e.medium = "CPU";  // the type carries no medium; keep the struct's default so round trips compare equal
  } else {
    bad(at(0), "unknown tag '" + tag + "'");
  }
  return e;
}

}  // namespace

std::string encode_kv_event_batch(const KvEventBatch& batch) {
  Packer p;
  msgpack_pack_array(&p.pk, batch.data_parallel_rank ? 3 : 2);
  msgpack_pack_double(&p.pk, batch.ts);
  msgpack_pack_array(&p.pk, batch.events.size());
  for (const KvEvent& e : batch.events) pack_event(p, e);
  if (batch.data_parallel_rank) msgpack_pack_int64(&p.pk, *batch.data_parallel_rank);
  return std::string(p.buf.data, p.buf.size);
}

KvEventBatch decode_kv_event_batch(std::string_view payload) {
  msgpack_unpacked u;
  msgpack_unpacked_init(&u);
  std::unique_ptr<msgpack_unpacked, void (*)(msgpack_unpacked*)> guard(&u, msgpack_unpacked_destroy);
  size_t off = 0;
  if (msgpack_unpack_next(&u, payload.data(), payload.size(), &off) != MSGPACK_UNPACK_SUCCESS)
    bad("payload", "not valid msgpack (" + std::to_string(payload.size()) + " bytes)");
  if (off != payload.size()) bad("payload", std::to_string(payload.size() - off) + " trailing bytes");
  const auto& top = array(u.data, "batch");
  if (top.size < 2) bad("batch", "expected [ts, events, (data_parallel_rank)]");
  KvEventBatch b;
  const msgpack_object& ts = top.ptr[0];
  if (ts.type == MSGPACK_OBJECT_FLOAT64 || ts.type == MSGPACK_OBJECT_FLOAT32) b.ts = ts.via.f64;
  else b.ts = double(integer(ts, "ts"));
  const auto& ev = array(top.ptr[1], "events");
  for (uint32_t i = 0; i < ev.size; ++i) b.events.push_back(unpack_event(ev.ptr[i], "events[" + std::to_string(i) + "]"));
  if (top.size > 2 && !is_nil(top.ptr[2])) b.data_parallel_rank = integer(top.ptr[2], "data_parallel_rank");
  return b;
}

std::string encode_kv_event_seq(uint64_t seq) {
  std::string s(8, '\0');
  for (int i = 7; i >= 0; --i, seq >>= 8) s[size_t(i)] = char(seq & 0xff);
  return s;
}

uint64_t decode_kv_event_seq(std::string_view frame) {
  if (frame.size() != 8) throw InputError("kv event message: the sequence frame has " + std::to_string(frame.size()) +
                                          " bytes, expected 8");
  uint64_t v = 0;
  for (char c : frame) v = (v << 8) | uint8_t(c);
  return v;
}

}  // namespace tp
