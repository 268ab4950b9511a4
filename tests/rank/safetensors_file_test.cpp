// safetensors reader and writer on small hand-built files; malformed headers and ranges give FormatError.
#include "rank/safetensors_file.h"

#include <gtest/gtest.h>

#include <cstring>

#include "common/error.h"
#include "tests/rank/loader_test_util.h"

namespace tp {
namespace {

using test::TempDir;

// 8-byte LE header length + header + data.
std::vector<uint8_t> make_st(const std::string& header, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> b(8 + header.size() + data.size());
  uint64_t n = header.size();
  std::memcpy(b.data(), &n, 8);
  std::memcpy(b.data() + 8, header.data(), header.size());
  if (!data.empty()) std::memcpy(b.data() + 8 + header.size(), data.data(), data.size());
  return b;
}

std::vector<uint8_t> sample_data() {
  std::vector<uint8_t> d(4 * 6 + 2 * 4 + 2 * 2);
  for (int k = 0; k < 6; ++k) {
    float v = float(k) + 0.5f;
    std::memcpy(d.data() + 4 * k, &v, 4);
  }
  for (int k = 0; k < 4; ++k) {
    uint16_t h = f32_to_f16(float(k) * 0.25f);
    std::memcpy(d.data() + 24 + 2 * k, &h, 2);
  }
  for (int k = 0; k < 2; ++k) {
    uint16_t h = f32_to_bf16(-float(k) - 1.0f);
    std::memcpy(d.data() + 32 + 2 * k, &h, 2);
  }
  return d;
}

const char* kHeader =
    R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
    R"("b":{"dtype":"F16","shape":[4],"data_offsets":[24,32]},"c":{"dtype":"BF16","shape":[1,2],"data_offsets":[32,36]}})";

TEST(SafetensorsFile, ReadsHandBuiltFile) {
  std::vector<uint8_t> b = make_st(kHeader, sample_data());
  SafetensorsFile f("x.safetensors", b.data(), b.size());
  ASSERT_EQ(f.tensors().size(), 3u);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  const SafetensorsTensor* a = f.find("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->dtype, DType::F32);
  EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 3}));
  float v;
  std::memcpy(&v, a->data + 4 * 5, 4);
  EXPECT_EQ(v, 5.5f);
  const SafetensorsTensor* bt = f.find("b");
  uint16_t h;
  std::memcpy(&h, bt->data + 2 * 3, 2);
  EXPECT_EQ(f16_to_f32(h), 0.75f);
  const SafetensorsTensor* c = f.find("c");
  EXPECT_EQ(c->dtype, DType::BF16);
  std::memcpy(&h, c->data + 2, 2);
  EXPECT_EQ(bf16_to_f32(h), -2.0f);
  EXPECT_EQ(f.find("zzz"), nullptr);
}

void expect_format_error(const std::string& header, const std::vector<uint8_t>& data, const std::string& needle) {
  std::vector<uint8_t> b = make_st(header, data);
  try {
    SafetensorsFile f("bad.safetensors", b.data(), b.size());
    ADD_FAILURE() << "accepted: " << header;
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).rfind("bad.safetensors: ", 0), 0u) << e.what();
  }
}

TEST(SafetensorsFile, RejectsMalformedHeaders) {
  const auto d = sample_data();
  expect_format_error(R"({"a":{"dtype":"F64","shape":[3],"data_offsets":[0,24]}})", d, "unsupported dtype 'F64'");
  expect_format_error(R"({"a":{"dtype":"I32","shape":[4],"data_offsets":[0,12]}})", d, "does not match shape");
  expect_format_error(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,400]}})", d, "a.data_offsets");
  expect_format_error(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", d, "does not match shape");
  expect_format_error(R"({"a":{"dtype":"F32","shape":[-3],"data_offsets":[0,12]}})", d, "a.shape");
  expect_format_error(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[12,0]}})", d, "a.data_offsets");
  expect_format_error(R"({"a":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,12]}})", d, "a.shape");
  expect_format_error(R"({"a":{"dtype":"F32","shape":[3]}})", d, "a.data_offsets");
  expect_format_error(R"({"a":{"shape":[3],"data_offsets":[0,12]}})", d, "a.dtype");
  expect_format_error(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},)"
                      R"("b":{"dtype":"F32","shape":[3],"data_offsets":[8,20]}})",
                      d, "overlaps");
  expect_format_error(R"({"a": [1, 2]})", d, "not a JSON object");
  expect_format_error(R"([1, 2])", d, "not a JSON object");
  expect_format_error(R"({"a": )", d, "invalid JSON");
  expect_format_error(R"({"__metadata__":{"x":1}})", d, "__metadata__.x");
}

// The integer / FP8 tensors of quantized checkpoints: read with their raw type and size, written back alike.
TEST(SafetensorsFile, RawTypesOfQuantizedCheckpoints) {
  const auto d = sample_data();  // 12 bytes
  std::vector<uint8_t> b = make_st(R"({"p":{"dtype":"I32","shape":[1,2],"data_offsets":[0,8]},)"
                                   R"("s":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[8,10]},)"
                                   R"("u":{"dtype":"U8","shape":[2],"data_offsets":[10,12]}})",
                                   d);
  SafetensorsFile f("q.safetensors", b.data(), b.size());
  ASSERT_NE(f.find("p"), nullptr);
  EXPECT_EQ(f.find("p")->raw, RawType::I32);
  EXPECT_EQ(f.find("p")->n_bytes, 8);
  EXPECT_EQ(f.find("s")->raw, RawType::F8E4M3);
  EXPECT_EQ(f.find("u")->raw, RawType::U8);
}

TEST(SafetensorsFile, TruncatedAtEveryCutPoint) {
  std::vector<uint8_t> b = make_st(kHeader, sample_data());
  for (size_t cut = 0; cut < b.size(); ++cut) {
    EXPECT_THROW(SafetensorsFile("cut.safetensors", b.data(), cut), FormatError) << "cut " << cut;
  }
  std::vector<uint8_t> huge(16, 0);
  uint64_t n = uint64_t(1) << 62;
  std::memcpy(huge.data(), &n, 8);
  EXPECT_THROW(SafetensorsFile("huge.safetensors", huge.data(), huge.size()), FormatError);
}

TEST(SafetensorsFile, WriterRoundTrip) {
  TempDir dir;
  const std::string path = dir.file("w.safetensors");
  std::vector<SafetensorsOut> outs;
  outs.push_back({"x", DType::F32, {2, 2}, [](uint8_t* d) {
                    float v[4] = {1, 2, 3, 4};
                    std::memcpy(d, v, 16);
                  }});
  outs.push_back({"y", DType::BF16, {3}, [](uint8_t* d) {
                    for (int k = 0; k < 3; ++k) {
                      uint16_t h = f32_to_bf16(float(k));
                      std::memcpy(d + 2 * k, &h, 2);
                    }
                  }});
  outs.push_back({"s", DType::F16, {}, [](uint8_t* d) {
                    uint16_t h = f32_to_f16(7.0f);
                    std::memcpy(d, &h, 2);
                  }});
  write_safetensors(path, outs, {{"format", "pt"}});
  SafetensorsFile f(path);
  ASSERT_EQ(f.tensors().size(), 3u);
  float v;
  std::memcpy(&v, f.find("x")->data + 12, 4);
  EXPECT_EQ(v, 4.0f);
  uint16_t h;
  std::memcpy(&h, f.find("y")->data + 4, 2);
  EXPECT_EQ(bf16_to_f32(h), 2.0f);
  EXPECT_TRUE(f.find("s")->shape.empty());
  EXPECT_EQ(f.find("s")->n_bytes, 2);
  std::memcpy(&h, f.find("s")->data, 2);
  EXPECT_EQ(f16_to_f32(h), 7.0f);
  uint64_t hn;
  std::vector<uint8_t> raw = test::read_bytes(path);
  std::memcpy(&hn, raw.data(), 8);
  EXPECT_EQ(hn % 8, 0u);
}

TEST(SafetensorsIndex, ReadsWeightMapAndRejectsPaths) {
  TempDir dir;
  test::write_string(dir.file("i.json"), R"({"metadata":{"total_size":8},"weight_map":{"a":"m-1.safetensors","b":"m-2.safetensors"}})");
  auto wm = read_safetensors_index(dir.file("i.json"));
  EXPECT_EQ(wm.size(), 2u);
  EXPECT_EQ(wm.at("b"), "m-2.safetensors");
  test::write_string(dir.file("j.json"), R"({"weight_map":{"a":"../etc/passwd"}})");
  EXPECT_THROW(read_safetensors_index(dir.file("j.json")), FormatError);
  test::write_string(dir.file("k.json"), R"({"weight_map":[]})");
  EXPECT_THROW(read_safetensors_index(dir.file("k.json")), FormatError);
  EXPECT_THROW(read_safetensors_index(dir.file("missing.json")), InputError);
}

}  // namespace
}  // namespace tp
