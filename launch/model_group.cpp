#include "launch/model_group.h"

#include <algorithm>
#include <limits>
#include <cstdio>
#include <vector>
#include <cstdlib>
#include <exception>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <utility>

#include <unistd.h>

#include "common/error.h"
#include "common/packed_weight.h"
#include "kernels/cpu/linear.h"
#include "kvstore/capacity.h"
#include "kvstore/gpu_memory_plan.h"
#include "launch/host_memory.h"
#include "rank/backend_kv_memory.h"
#include "rank/compressed_tensors.h"
#include "parallel/nccl_setup.h"
#include "rank/staged_communicator.h"
#include "rank/weight_loader.h"
#include "launch/load_progress.h"

namespace tp {
namespace {

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

}  // namespace

bool launched_by_mpi() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMIX_RANK") || std::getenv("PMI_RANK");
}

namespace {

// parallel.rank_memory: this rank's weights + KV pool must fit in it. The message gives the planner's numbers.
void check_rank_memory(const Config& cfg, int64_t weight_bytes, int64_t n_blocks, int64_t block_bytes) {
  int64_t limit = 0;
  try {
    limit = parse_byte_size(cfg.parallel.rank_memory, "parallel.rank_memory");
  } catch (const InputError& e) {
    throw ConfigError(cfg.source, "parallel.rank_memory", e.what());
  }
  const int64_t kv = n_blocks * block_bytes, need = weight_bytes + kv;
  if (need <= limit) return;
  throw ConfigError(cfg.source, "parallel.rank_memory",
                    format_binary_bytes(limit) + " per rank does not hold this rank's weights " +
                        format_binary_bytes(weight_bytes) + " + KV pool " + format_binary_bytes(kv) + " (" +
                        std::to_string(n_blocks) + " blocks of " + std::to_string(block_bytes) +
                        " B) = " + format_binary_bytes(need) + ": " + format_binary_bytes(need - limit) +
                        " missing; raise --tp (weights / tp per rank) or lower cache.memory_mb");
}

// Runs one phase of the start-up and makes its outcome the TP group's. A rank that throws while the others go on
// leaves them waiting in the next collective and itself in MPI_Finalize: a hang with no message (seen with an
// FP8-block checkpoint at tp 3, where the last rank's column slice ended on the file's last, partial block and the
// others' slices cut blocks). Every rank learns of the lowest failing rank: a failing rank rethrows its own error,
// the others throw the same kind (usage, input, internal: the same exit code) naming that rank and its message.
void agree_on_outcome(Communicator* comm, const std::function<void()>& phase) {
  struct Outcome {
    int32_t kind = 0;  // 0 ok, 1 UsageError, 2 InputError, 3 any other error
    char what[1020] = {};
  } mine;
  std::exception_ptr error;
  auto keep = [&](int kind, const char* what) {
    error = std::current_exception();
    mine.kind = kind;
    std::snprintf(mine.what, sizeof mine.what, "%s", what);
  };
  try {
    phase();
  } catch (const UsageError& e) {
    keep(1, e.what());
  } catch (const InputError& e) {
    keep(2, e.what());
  } catch (const std::exception& e) {
    keep(3, e.what());
  } catch (...) {
    keep(3, "an unknown exception");
  }
  if (comm && comm->size() > 1) {
    std::vector<Outcome> all(size_t(comm->size()));
    comm->all_gather(&mine, sizeof mine, all.data());
    if (!error)
      for (int r = 0; r < comm->size(); ++r) {
        const Outcome& o = all[size_t(r)];
        if (o.kind == 0) continue;
        const std::string msg = "rank " + std::to_string(r) + " of the TP group failed: " + o.what;
        if (o.kind == 1) throw UsageError(msg);
        if (o.kind == 2) throw InputError(msg);
        throw Error(msg);
      }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace

ModelGroup::ModelGroup(int* argc, char*** argv, const Config& cfg, int threads_arg,
                       std::function<void(const std::string&)> progress_line) {
  const int64_t want = cfg.parallel.tp * cfg.parallel.dp;
  if (launched_by_mpi()) {
    mpi = std::make_unique<MpiSession>(argc, argv);
    world = std::make_unique<MpiCommunicator>(MpiCommunicator::world());
    if (world->size() != want)
      throw UsageError("mpirun started " + std::to_string(world->size()) + " ranks but tp × dp = " +
                       std::to_string(cfg.parallel.tp) + " × " + std::to_string(cfg.parallel.dp) + " = " +
                       std::to_string(want) + " (use -np " + std::to_string(want) + " or launch/start)");
    if (cfg.parallel.dp != 1) throw UsageError("dp > 1 is not supported yet (data parallelism arrives later)");
    tp_comm = std::make_unique<MpiCommunicator>(world->split_tp_group(int(cfg.parallel.tp)));
  } else if (want != 1) {
    throw UsageError("tp × dp = " + std::to_string(want) + " needs " + std::to_string(want) +
                     " MPI ranks: run under `mpirun -np " + std::to_string(want) + "` or launch/start");
  }
  const int local_ranks = std::max(1, env_int("OMPI_COMM_WORLD_LOCAL_SIZE", 1));
  // The backend first: a device this build or host cannot give is refused before anything loads.
  const int local_rank = world ? node_place(world->handle()).local_rank : 0;
  agree_on_outcome(tp_comm.get(), [&] { backend = make_backend(cfg.model.device, local_rank, cfg.source); });
  if (!backend->host_memory() && tp_comm && tp_comm->size() > 1) {
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    const CollectivePlan plan =
        plan_collectives(gather_device_keys(*tp_comm, std::string(host) + "/" + backend->name()), nccl_built());
    if (plan.path == CollectivePath::Nccl)
      device_comm = make_nccl_communicator(*tp_comm);
    else
      device_comm = std::make_unique<StagedCommunicator>(*tp_comm, *backend);
    if (world_rank() == 0) std::fprintf(stderr, "collectives: %s\n", plan.reason.c_str());
  }
  threads = threads_arg > 0 ? threads_arg : std::max(1, int(std::thread::hardware_concurrency()) / local_ranks);
  cpu::set_num_threads(threads);

  // Each rank loads its own slice (no collective until the pool's block count below): one failure, the group's.
  KvPoolShape shape;
  KvTensorScales kv_scales;
  int64_t block_bytes = 0, n_blocks = 0;
  agree_on_outcome(tp_comm.get(), [&] {
    file = open_model(cfg.model.path);
    check_config_for_model(cfg, file->config().max_context, cfg.model.path);  // before the weights load
    const DType runtime = parse_runtime_dtype(cfg.model.dtype, "model.dtype");
    // Rank 0 only: the others stay quiet.
    LoadProgressPrinter printer = progress_line ? LoadProgressPrinter(std::move(progress_line))
                                                : LoadProgressPrinter(stderr, isatty(STDERR_FILENO) != 0);
    LoadProgress progress;
    if (world_rank() == 0)
      progress = [&printer](int64_t done, int64_t n, int64_t bytes) { printer.update(done, n, bytes); };
    keep_quantized = parse_quantized_mode(cfg.model.quantized, "model.quantized");
    const WeightLoadOptions load{runtime, keep_quantized};
    Communicator* forward_comm = device_comm ? device_comm.get() : static_cast<Communicator*>(tp_comm.get());
    model = std::make_unique<LlamaModel>(*file, load, forward_comm, progress, backend.get());
    const KvDType kv_dtype = parse_kv_dtype(cfg.cache.dtype, cfg.source + ": cache.dtype");
    // A checkpoint's per-layer k_scale / v_scale (compressed-tensors kv_cache_scheme): fp8_e4m3 and int8 use them
    // (int8 then keeps no block scales), as vLLM does with --kv-cache-dtype fp8; bf16 / f32 ignore them. Without
    // them fp8_e4m3 stores at scale 1 and int8 keeps a scale per block and KV head.
    if (kv_takes_tensor_scales(kv_dtype))
      if (auto s = kv_cache_scales_all(*file, model->config().n_layers))
        kv_scales = {std::move(s->first), std::move(s->second)};
    const bool tensor_scales = !kv_scales.k.empty();
    shape = model->kv_shape(1, cfg.cache.block_size, kv_dtype);
    shape.tensor_scales = tensor_scales;
    // Block bytes from kvstore/capacity, as the engine's report and `tpserve plan` count them; the pool's own
    // layout must agree.
    const KvFootprint fp = kv_footprint(model_shape_from(model->config(), 0), model->layout().local_kv_heads(),
                                        kv_cost(kv_dtype, tensor_scales));
    block_bytes = fp.block_bytes(cfg.cache.block_size);
    if (shape.block_bytes() != block_bytes) throw Error("KV pool and capacity arithmetic disagree on the block bytes");
    n_blocks = cfg.cache.memory_mb * (int64_t(1) << 20) / block_bytes;
    if (!backend->host_memory()) {
      // A GPU: cache.gpu_memory_utilization of the device for weights + activations + KV (kvstore/gpu_memory_plan.h);
      // the activation peak is what the forward holds at the largest step (every token a logit row at most).
      const int64_t max_tok = cfg.scheduler.max_num_batched_tokens;
      const GpuMemoryPlan plan = plan_gpu_memory(backend->device_memory_bytes(), cfg.cache.gpu_memory_utilization,
                                                 model->resident_weight_bytes(),
                                                 model->activation_bytes(max_tok, max_tok), fp, cfg.cache.block_size);
      if (world_rank() == 0)
        std::fprintf(stderr, "%s", gpu_memory_report(plan, fp, model->config().max_context).c_str());
      check_gpu_memory_plan(plan, cfg.source);  // before the pool is allocated
      n_blocks = plan.pool.n_blocks;
    }
  });
  if (tp_comm) {  // every rank of the group must hold the same blocks: agree on the smallest count
    std::vector<int64_t> counts(size_t(tp_comm->size()));
    tp_comm->all_gather(&n_blocks, sizeof n_blocks, counts.data());
    n_blocks = *std::min_element(counts.begin(), counts.end());
  }
  // The pool must fit in what this node has left once every rank holds its weights (with tp, the all-gather
  // above is where they all do); the ranks agree on the smallest MemAvailable any of them sees.
  int64_t available = mem_available_bytes().value_or(-1);
  if (tp_comm) {
    std::vector<int64_t> seen(size_t(tp_comm->size()));
    tp_comm->all_gather(&available, sizeof available, seen.data());
    for (int64_t a : seen)
      if (a >= 0 && (available < 0 || a < available)) available = a;
  }
  // The rest checks this rank's figures (its weights' bytes differ from rank to rank) and builds its pool and worker:
  // again one outcome for the group, before the engine's first collective.
  agree_on_outcome(tp_comm.get(), [&] {
    if (available >= 0 && backend->host_memory()) check_kv_memory(cfg, available, local_ranks);
    if (n_blocks < 1)
      throw InputError(cfg.source + ": cache.memory_mb: " + std::to_string(cfg.cache.memory_mb) +
                       " MiB holds no KV block of " + std::to_string(block_bytes) + " bytes");
    if (!cfg.parallel.rank_memory.empty())
      check_rank_memory(cfg, model->resident_weight_bytes(), n_blocks, block_bytes);
    shape.n_blocks = n_blocks;
    // On a GPU the pool lives in device memory (rank/backend_kv_memory.h); on CPU in host memory.
    pool = std::make_unique<KvPool>(shape, std::move(kv_scales),
                                    backend->host_memory() ? nullptr : backend_kv_memory(backend));
    worker = std::make_unique<Worker>(*model, *pool, tp_comm.get());
  });
}

ModelGroup::~ModelGroup() {
  try {
    if (worker) worker->shutdown();
  } catch (const std::exception&) {
    // the group is already broken; MPI teardown below reports nothing more useful
  }
}

EngineConfig ModelGroup::engine_config(const Config& cfg) const {
  const KvFootprint fp = kv_footprint(model_shape_from(model->config(), 0), model->layout().local_kv_heads(),
                                      kv_cost(pool->shape().dtype, pool->shape().tensor_scales));
  EngineConfig e = make_engine_config(cfg, fp, model->config().max_context, model->config().vocab);
  if (!backend->host_memory()) {
    // On a GPU the memory plan sized the pool (cache.gpu_memory_utilization), not cache.memory_mb: the engine
    // schedules the blocks the pool holds, and reports the bytes they take.
    if (pool->shape().n_blocks > std::numeric_limits<int32_t>::max())
      throw InputError(cfg.source + ": cache.gpu_memory_utilization: " + std::to_string(pool->shape().n_blocks) +
                       " blocks exceed the int32 block ids");
    e.scheduler.n_blocks = int32_t(pool->shape().n_blocks);
    e.kv_budget_bytes = pool->n_bytes();
  }
  if (e.scheduler.n_blocks != pool->shape().n_blocks)
    throw Error("engine and pool disagree on the block count: " + std::to_string(e.scheduler.n_blocks) + " vs " +
                std::to_string(pool->shape().n_blocks));
  return e;
}

std::string ModelGroup::report() const {
  char buf[256];
  const TpLayout& l = model->layout();
  std::snprintf(
      buf, sizeof buf,
      "rank %d (tp %d/%d): weights %.1f MiB, KV pool %s%s %lld blocks × %lld tokens = %lld B (%.1f MiB), %d threads",
      world_rank(), l.rank, l.tp, double(model->resident_weight_bytes()) / (1 << 20),
      std::string(kv_dtype_name(pool->shape().dtype)).c_str(),
      pool->shape().tensor_scales ? " (the checkpoint's k_scale/v_scale)" : "", (long long)pool->shape().n_blocks,
      (long long)pool->shape().block_size, (long long)pool->n_bytes(), double(pool->n_bytes()) / (1 << 20), threads);
  // GGUF block types no kernel keeps (IQ4_XS) were requantized at load into the
  // type they are held in: say so, per held type (with model.quantized: dequantize every weight is dense anyway).
  std::map<std::string, std::set<std::string>> held;  // held as -> the file's types
  for (const TensorView& t : file->tensors())
    if (keep_quantized && t.raw == RawType::None && is_quantized(t.dtype) && !is_gguf_block_dtype(t.dtype))
      held[std::string(dtype_name(gguf_held_dtype(t.dtype)))].insert(std::string(dtype_name(t.dtype)));
  std::string line = buf, list;
  for (const auto& [as, types] : held) {
    std::string names;
    for (const std::string& d : types) names += (names.empty() ? "" : ", ") + d;
    list += (list.empty() ? "" : "; ") + names + " weights held as " + as;
  }
  if (!list.empty()) line += "; its " + list + " (requantized at load: no kernel keeps them)";
  return line;
}

}  // namespace tp
