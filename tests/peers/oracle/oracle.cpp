// tpserve-oracle: reference token ids and greedy continuations from llama.cpp (the peer, see
// tests/peers/README.md). Linked against the libllama built by tests/peers/build_llama_cpp.sh.
//
// Usage:
//   tpserve-oracle tokenize   MODEL.gguf IN.json OUT.json [options]
//       IN: JSON array of strings. OUT: {"cases":[{"text","ids"}]}; add_special=false, parse_special=true.
//   tpserve-oracle generate   MODEL.gguf IN.json OUT.json [options]
//       IN: JSON array of prompt strings. Greedy (argmax over raw logits, lowest id wins a tie),
//       prompt tokenized with add_special=true, parse_special=true; stops early only on an EOG token.
//   tpserve-oracle detokenize MODEL.gguf IN.json OUT.json
//       IN: JSON array of id arrays. OUT: JSON array of strings (special tokens rendered).
// Options:
//   --n-predict N      (generate; default 48)
//   --n-ctx N          (default 512)
//   --threads N        (default 2)
//   --kv-type f32|f16  (default f32)
//   --llama-version S  copied into the output's "llama_cpp_version"
//   --command S        copied into the output's "command"
//   --model-name S     copied into the output's "model" (default: file name of MODEL.gguf)
//   --model-source S   copied into the output's "model_source" (how the GGUF was made), if given
#include "llama.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

using json = nlohmann::ordered_json;

namespace {

struct Options {
    std::string mode, model_path, in_path, out_path;
    int n_predict = 48;
    int n_ctx = 512;
    int threads = 2;
    std::string kv_type = "f32";
    std::string llama_version, command, model_name, model_source;
};

// Ids whose first-position logits are recorded besides the top-5 (so a max-abs-diff test has 32+ points).
const std::vector<int> kFixedLogitIds = {0,     1,     2,     3,     4,     5,     6,     7,
                                         8,     9,     10,    11,    12,    13,    14,    15,
                                         256,   1000,  2000,  4000,  6000,  8000,  10000, 12000,
                                         16000, 20000, 24000, 28000, 32000, 40000, 45000, 49151};

[[noreturn]] void die(const std::string& msg) {
    std::fprintf(stderr, "tpserve-oracle: %s\n", msg.c_str());
    std::exit(1);
}

void quiet_log(ggml_log_level level, const char* text, void*) {
    if (level >= GGML_LOG_LEVEL_WARN) std::fputs(text, stderr);
}

std::vector<llama_token> tokenize(const llama_vocab* vocab, const std::string& text, bool add_special,
                                  bool parse_special) {
    std::vector<llama_token> ids(text.size() + 8);
    int n = llama_tokenize(vocab, text.data(), (int32_t)text.size(), ids.data(), (int32_t)ids.size(),
                           add_special, parse_special);
    if (n < 0) {
        if (n == INT32_MIN) die("tokenize overflow");
        ids.resize((size_t)-n);
        n = llama_tokenize(vocab, text.data(), (int32_t)text.size(), ids.data(), (int32_t)ids.size(),
                           add_special, parse_special);
        if (n < 0) die("tokenize failed");
    }
    ids.resize((size_t)n);
    return ids;
}

std::string detokenize(const llama_vocab* vocab, const std::vector<llama_token>& ids) {
    std::string out(ids.size() * 16 + 16, '\0');
    int n = llama_detokenize(vocab, ids.data(), (int32_t)ids.size(), out.data(), (int32_t)out.size(),
                             /*remove_special=*/false, /*unparse_special=*/true);
    if (n < 0) {
        out.resize((size_t)-n);
        n = llama_detokenize(vocab, ids.data(), (int32_t)ids.size(), out.data(), (int32_t)out.size(), false,
                             true);
        if (n < 0) die("detokenize failed");
    }
    out.resize((size_t)n);
    return out;
}

std::string piece(const llama_vocab* vocab, llama_token id) {
    char buf[256];
    int n = llama_token_to_piece(vocab, id, buf, sizeof buf, 0, true);
    if (n < 0) return "";
    return std::string(buf, (size_t)n);
}

// nlohmann::json throws on invalid UTF-8 when dumping; pieces of byte-level tokens can be partial UTF-8.
// Replace invalid sequences with U+FFFD for the human-readable fields only.
std::string sanitize_utf8(const std::string& s) {
    std::string out;
    size_t i = 0;
    while (i < s.size()) {
        unsigned char c = (unsigned char)s[i];
        int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        bool ok = len > 0 && i + len <= s.size();
        for (int k = 1; ok && k < len; ++k) ok = ((unsigned char)s[i + k] >> 6) == 2;
        if (ok) {
            out.append(s, i, (size_t)len);
            i += (size_t)len;
        } else {
            out += "\xEF\xBF\xBD";
            ++i;
        }
    }
    return out;
}

json read_json(const std::string& path) {
    std::ifstream f(path);
    if (!f) die("cannot open " + path);
    return json::parse(f);
}

void write_json(const std::string& path, const json& j) {
    std::ofstream f(path);
    if (!f) die("cannot write " + path);
    // One case per line keeps the committed fixtures diffable yet compact.
    f << "{\n";
    size_t k = 0;
    for (auto it = j.begin(); it != j.end(); ++it, ++k) {
        f << "  " << json(it.key()).dump() << ": ";
        if (it.key() == "cases" && it->is_array()) {
            f << "[\n";
            for (size_t i = 0; i < it->size(); ++i)
                f << "    " << (*it)[i].dump() << (i + 1 < it->size() ? ",\n" : "\n");
            f << "  ]";
        } else {
            f << it->dump();
        }
        f << (k + 1 < j.size() ? ",\n" : "\n");
    }
    f << "}\n";
}

json header(const Options& o) {
    json j;
    j["llama_cpp_version"] = o.llama_version;
    j["command"] = o.command;
    if (!o.model_source.empty()) j["model_source"] = o.model_source;
    return j;
}

llama_model* load_model(const Options& o, bool vocab_only) {
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    mp.vocab_only = vocab_only;
    mp.use_extra_bufts = false;
    mp.load_mode = LLAMA_LOAD_MODE_NONE;  // read into memory: no mmap, so a concurrent rewrite can't SIGBUS us
    mp.progress_callback = [](float, void*) { return true; };  // silence the loading dots  // plain ggml-cpu kernels: no weight repacking, no AMX buffers
    llama_model* model = llama_model_load_from_file(o.model_path.c_str(), mp);
    if (!model) die("failed to load " + o.model_path);
    return model;
}

int run_tokenize(const Options& o) {
    json in = read_json(o.in_path);
    if (!in.is_array()) die("tokenize input must be a JSON array of strings");
    llama_model* model = load_model(o, /*vocab_only=*/true);
    const llama_vocab* vocab = llama_model_get_vocab(model);
    json out = header(o);
    out["model"] = o.model_name;
    out["settings"] = {{"add_special", false}, {"parse_special", true}};
    json cases = json::array();
    for (const auto& t : in) {
        std::string text = t.get<std::string>();
        cases.push_back({{"text", text}, {"ids", tokenize(vocab, text, false, true)}});
    }
    out["cases"] = cases;
    write_json(o.out_path, out);
    llama_model_free(model);
    std::fprintf(stderr, "tpserve-oracle: tokenized %zu strings -> %s\n", in.size(), o.out_path.c_str());
    return 0;
}

int run_detokenize(const Options& o) {
    json in = read_json(o.in_path);
    llama_model* model = load_model(o, true);
    const llama_vocab* vocab = llama_model_get_vocab(model);
    json out = json::array();
    for (const auto& ids : in) out.push_back(sanitize_utf8(detokenize(vocab, ids.get<std::vector<llama_token>>())));
    std::ofstream(o.out_path) << out.dump(1) << "\n";
    llama_model_free(model);
    return 0;
}

int run_generate(const Options& o) {
    json in = read_json(o.in_path);
    if (!in.is_array()) die("generate input must be a JSON array of strings");
    llama_model* model = load_model(o, false);
    const llama_vocab* vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);

    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)o.n_ctx;
    cp.n_batch = (uint32_t)o.n_ctx;
    cp.n_ubatch = (uint32_t)o.n_ctx;
    cp.n_seq_max = 1;
    cp.n_threads = o.threads;
    cp.n_threads_batch = o.threads;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    const ggml_type kv = o.kv_type == "f16" ? GGML_TYPE_F16 : GGML_TYPE_F32;
    cp.type_k = kv;
    cp.type_v = kv;
    cp.offload_kqv = false;
    cp.op_offload = false;
    cp.no_perf = true;

    char desc[256] = {0};
    llama_model_desc(model, desc, sizeof desc);

    json out = header(o);
    out["model"] = o.model_name;
    out["settings"] = {
        {"model_desc", desc},
        {"n_vocab", n_vocab},
        {"n_predict", o.n_predict},
        {"n_ctx", o.n_ctx},
        {"n_batch", o.n_ctx},
        {"n_ubatch", o.n_ctx},
        {"n_threads", o.threads},
        {"type_k", o.kv_type},
        {"type_v", o.kv_type},
        {"flash_attn", false},
        {"backend", "CPU only (n_gpu_layers=0, use_extra_bufts=false: no weight repacking / AMX, load_mode=none: no mmap)"},
        {"prompt_tokenize", "llama_tokenize(add_special=true, parse_special=true)"},
        {"add_bos", llama_vocab_get_add_bos(vocab)},
        {"sampling",
         "greedy: argmax over raw logits from llama_get_logits_ith (lowest id wins a tie); no sampler chain"},
        {"stop", "stop early only when the generated token is EOG (llama_vocab_is_eog); that token is included"},
        {"prompt_decode", "whole prompt in one llama_decode, then one token per llama_decode; fresh context per prompt"},
        {"top2_gap", "top2_gap[i] = top1 logit - top2 logit of the distribution tokens[i] was taken from"},
        {"first_top5", "[id, logit] of the 5 largest logits at the first generated position"},
        {"first_fixed_logits", "[id, logit] at the first generated position for the fixed ids in first_fixed_ids"},
        {"first_fixed_ids", kFixedLogitIds},
        {"first_logits_stats", "mean and population std of all n_vocab first-position logits"},
        {"system_info", llama_print_system_info()},
    };

    json cases = json::array();
    for (const auto& p : in) {
        const std::string prompt = p.get<std::string>();
        std::vector<llama_token> prompt_ids = tokenize(vocab, prompt, /*add_special=*/true, /*parse_special=*/true);
        if ((int)prompt_ids.size() + o.n_predict > o.n_ctx) die("prompt too long for n_ctx");

        llama_context* ctx = llama_init_from_model(model, cp);
        if (!ctx) die("llama_init_from_model failed");

        std::vector<llama_token> tokens;
        std::vector<float> gaps;
        json first_top5 = json::array(), first_fixed = json::array();
        double mean = 0, stdev = 0;
        bool stopped = false;

        std::vector<llama_token> cur = prompt_ids;
        for (int step = 0; step < o.n_predict; ++step) {
            llama_batch batch = llama_batch_get_one(cur.data(), (int32_t)cur.size());
            if (int rc = llama_decode(ctx, batch); rc != 0) die("llama_decode failed: " + std::to_string(rc));
            const float* logits = llama_get_logits_ith(ctx, -1);
            if (!logits) die("no logits");

            int best = 0;
            for (int i = 1; i < n_vocab; ++i)
                if (logits[i] > logits[best]) best = i;
            int second = best == 0 ? 1 : 0;
            for (int i = 0; i < n_vocab; ++i)
                if (i != best && logits[i] > logits[second]) second = i;
            gaps.push_back(logits[best] - logits[second]);

            if (step == 0) {
                std::vector<int> idx(n_vocab);
                for (int i = 0; i < n_vocab; ++i) idx[i] = i;
                std::partial_sort(idx.begin(), idx.begin() + 5, idx.end(), [&](int a, int b) {
                    return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
                });
                for (int k = 0; k < 5; ++k) first_top5.push_back({idx[k], logits[idx[k]]});
                for (int id : kFixedLogitIds)
                    if (id < n_vocab) first_fixed.push_back({id, logits[id]});
                for (int i = 0; i < n_vocab; ++i) mean += logits[i];
                mean /= n_vocab;
                for (int i = 0; i < n_vocab; ++i) stdev += (logits[i] - mean) * (logits[i] - mean);
                stdev = std::sqrt(stdev / n_vocab);
            }

            tokens.push_back(best);
            if (llama_vocab_is_eog(vocab, best)) {
                stopped = true;
                break;
            }
            cur.assign(1, best);
        }
        llama_free(ctx);

        json c;
        c["prompt"] = prompt;
        c["prompt_ids"] = prompt_ids;
        c["tokens"] = tokens;
        c["stopped_at_eos"] = stopped;
        c["top2_gap"] = gaps;
        c["first_top5"] = first_top5;
        c["first_fixed_logits"] = first_fixed;
        c["first_logits_stats"] = {{"mean", mean}, {"std", stdev}};
        c["completion_text"] = sanitize_utf8(detokenize(vocab, tokens));
        cases.push_back(c);
        std::fprintf(stderr, "tpserve-oracle: prompt %zu: %zu prompt ids, %zu generated%s\n", cases.size(),
                     prompt_ids.size(), tokens.size(), stopped ? " (EOG)" : "");
    }
    out["cases"] = cases;
    write_json(o.out_path, out);
    llama_model_free(model);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    Options o;
    std::vector<std::string> pos;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        auto next = [&]() -> std::string {
            if (i + 1 >= argc) die("missing value for " + a);
            return argv[++i];
        };
        if (a == "--n-predict") o.n_predict = std::atoi(next().c_str());
        else if (a == "--n-ctx") o.n_ctx = std::atoi(next().c_str());
        else if (a == "--threads") o.threads = std::atoi(next().c_str());
        else if (a == "--kv-type") o.kv_type = next();
        else if (a == "--llama-version") o.llama_version = next();
        else if (a == "--command") o.command = next();
        else if (a == "--model-name") o.model_name = next();
        else if (a == "--model-source") o.model_source = next();
        else if (a.rfind("--", 0) == 0) die("unknown option " + a);
        else pos.push_back(a);
    }
    if (pos.size() != 4) {
        std::fprintf(stderr, "usage: tpserve-oracle tokenize|generate|detokenize MODEL.gguf IN.json OUT.json [options]\n");
        return 2;
    }
    o.mode = pos[0];
    o.model_path = pos[1];
    o.in_path = pos[2];
    o.out_path = pos[3];
    if (o.model_name.empty()) {
        auto s = o.model_path.find_last_of('/');
        o.model_name = s == std::string::npos ? o.model_path : o.model_path.substr(s + 1);
    }
    if (o.kv_type != "f32" && o.kv_type != "f16") die("--kv-type must be f32 or f16");

    llama_log_set(quiet_log, nullptr);
    llama_backend_init();
    int rc = 2;
    if (o.mode == "tokenize") rc = run_tokenize(o);
    else if (o.mode == "generate") rc = run_generate(o);
    else if (o.mode == "detokenize") rc = run_detokenize(o);
    else die("unknown mode " + o.mode);
    llama_backend_free();
    return rc;
}
