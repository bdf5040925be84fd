/* epifuse's C ABI (docs/python.md): what the Python module calls through ctypes,
 * and what any other language can. Opaque handles, plain C types, no exception
 * crosses it.
 *
 * Every function that can fail returns a status, the CLI's exit codes:
 * EF_OK, EF_USER_ERROR (a bad chain, operand, shape or option), EF_COMPILE_ERROR,
 * EF_RUNTIME_ERROR (the driver, a device, a launch). The message of the last
 * failure on the calling thread is ef_last_error()'s.
 *
 * A NULL pointer where an object is wanted, or a NULL array with a non-zero
 * count, is EF_USER_ERROR naming the argument; nothing here dereferences it.
 *
 * Threads: each ef_spec carries a reader-writer lock. Builder calls
 * (ef_spec_input, _accumulator, _op, _output, _set_precision) hold it
 * exclusively; ef_spec_verify, _to_json and _clone hold it shared; ef_spec_bindings,
 * ef_evaluate and ef_jit_compile copy the spec under the shared lock and work on
 * the copy, so any number of threads may build, serialise and run one spec at
 * once, each call seeing the spec as it was at some instant. ef_spec_free must
 * come after every other call on that spec has returned.
 *
 *   ef_spec* s;
 *   if (ef_spec_from_json(text, "chain.json", &s) != EF_OK) puts(ef_last_error());
 *   char* bindings;  // {"inputs": [{"name", "dtype", "shape"}...], "outputs": [...]}
 *   ef_spec_bindings(s, 256, 1024, 0, &bindings);
 *   ...
 *   ef_string_free(bindings);
 *   ef_spec_free(s);
 */
#ifndef EPIFUSE_C_API_H
#define EPIFUSE_C_API_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define EF_OK 0
#define EF_USER_ERROR 2
#define EF_COMPILE_ERROR 3
#define EF_RUNTIME_ERROR 4

typedef struct ef_spec ef_spec;     /* a KernelSpec: graph + mainloop */
typedef struct ef_jit ef_jit;       /* a Jit: compiler, caches, device */
typedef struct ef_kernel ef_kernel; /* a compiled kernel, owned by its caller */

/* "0.1.0" */
const char* ef_version(void);
/* The message of this thread's last failure ("" after a success). */
const char* ef_last_error(void);
/* Frees a string an ef_* function returned. */
void ef_string_free(char* s);

/* ---- specs */
/* A spec from JSON v1 text (docs/json-schema.md); errors name a JSON path,
 * after `source` (a file name; NULL: "<json>"). */
int ef_spec_from_json(const char* text, const char* source, ef_spec** out);
/* The same from `size` bytes at `data` (not NUL-terminated), read by exactly the
 * rules of the CLI's `--chain` reader: at most ef_spec_json_limit() bytes, no NUL
 * byte, JSON v1 with no key repeated in an object. What a file loader passes
 * after reading at most ef_spec_json_limit() + 1 bytes. */
int ef_spec_from_json_bytes(const char* data, size_t size, const char* source, ef_spec** out);
/* The most bytes a chain's JSON text may have (1 MiB, docs/limits.md). */
size_t ef_spec_json_limit(void);
/* An independent copy of `spec` as it is now: later calls on either do not
 * reach the other, and each is freed on its own. */
int ef_spec_clone(const ef_spec* spec, ef_spec** out);
/* An empty spec to build on. `mainloop_json`: NULL for "elementwise", else the
 * JSON value of "mainloop" ({"kind": "gemm", "a": "f16", ...}). */
int ef_spec_new(const char* name, const char* mainloop_json, ef_spec** out);
void ef_spec_free(ef_spec* spec);
/* The builder, checked at each call like the C++ Graph (graph.hpp). Values are ids.
 * JSON fragments (a mainloop, an op's attributes) are read with the CLI's rules:
 * a repeated key or a number beyond a double (1e999) is EF_USER_ERROR. */
int ef_spec_input(ef_spec* spec, const char* name, const char* dtype, const char* broadcast, uint32_t* value);
/* `acc` (index 0) or a dual GEMM's `acc0`/`acc1`. */
int ef_spec_accumulator(ef_spec* spec, int index, uint32_t* value);
/* Marks input `value` differentiable (1, the default) or not (0: JSON's
 * "grad": false, an additive mask): ef_spec_grad never differentiates it. */
int ef_spec_set_differentiable(ef_spec* spec, uint32_t value, int differentiable);
/* An op by its JSON name (an op-table row or a composite: softmax, rmsnorm, ...).
 * `attributes_json`: NULL or a JSON object of its attributes ({"p": 0.1}). */
int ef_spec_op(ef_spec* spec, const char* op, const uint32_t* args, size_t nargs, const char* attributes_json,
               uint32_t* value);
int ef_spec_output(ef_spec* spec, const char* name, uint32_t value, const char* dtype);
/* "accurate" or "fast" (docs/design.md §3). */
int ef_spec_set_precision(ef_spec* spec, const char* precision);
/* Checks the whole spec (every leaf matches the mainloop, outputs exist). */
int ef_spec_verify(const ef_spec* spec);
/* JSON v1 text of the spec (ef_string_free it). */
int ef_spec_to_json(const ef_spec* spec, char** out);
/* grad(spec) (docs/autodiff.md): `wrt_json` a JSON array of input names, or
 * NULL or "" for every differentiable input. On success *forward (the spec
 * with its saved tensors as extra outputs) and *backward are new specs
 * (ef_spec_free them) and *info is {"wrt": [...], "saved": [{"name", "kind",
 * "of"}...]} (ef_string_free it); on failure none is set. */
int ef_spec_grad(const ef_spec* spec, const char* wrt_json, ef_spec** forward, ef_spec** backward, char** info);
/* as_gemm_epilogue (include/epifuse/dgrad.hpp, docs/gemm-backward.md §1): the
 * elementwise spec `backward` (a backward of ef_spec_grad) with its full input
 * `upstream` ("dy") replaced by the accumulator of a GEMM whose mainloop is
 * `mainloop_json` (the JSON value of "mainloop", {"kind": "gemm", ...}, read as
 * ef_spec_new reads it): one GEMM dY_above·W_above writes the backward's
 * outputs (dacc, the bias gradient) in its epilogue. Every other input, op
 * (dropout streams included) and output is kept. On success *out is a new spec
 * (ef_spec_free it); on failure it is not set. EF_USER_ERROR for a `backward`
 * that is not elementwise, an `upstream` that is not one of its full inputs, a
 * mainloop that is not a single GEMM, or a result that does not verify
 * (ef_spec_verify: an input named like a GEMM operand, a, b, b0 or b1).
 * Whether a GEMM family runs the result (column sums, [M] outputs) is checked
 * when it is compiled, as for any chain. */
int ef_spec_as_gemm_epilogue(const ef_spec* backward, const char* upstream, const char* mainloop_json, ef_spec** out);
/* What a run of `spec` at (m, n, k) binds, as JSON: {"inputs": [{"name",
 * "dtype", "shape"}...], "outputs": [...]}, logical row-major shapes, GEMM
 * operands first; an output also has "broadcast": "full" [M,N], "row" [N] (a
 * column sum) or "col" [M] (a per-row statistic). k is ignored for elementwise specs. */
int ef_spec_bindings(const ef_spec* spec, int64_t m, int64_t n, int64_t k, char** out);

/* ---- the CPU reference (--device cpu) */
/* Runs the reference evaluator. `inputs[i]` points at input `input_names[i]`'s
 * logical row-major bytes in its dtype (bf16 and f16 as 16-bit patterns);
 * `outputs[i]` receives output `output_names[i]` likewise. Every binding of
 * ef_spec_bindings must be given once, with exactly its shape's bytes; a name
 * given twice is EF_USER_ERROR. */
int ef_evaluate(const ef_spec* spec, int64_t m, int64_t n, int64_t k, const char* const* input_names,
                const void* const* inputs, size_t ninputs, const char* const* output_names, void* const* outputs,
                size_t noutputs, uint64_t seed, uint64_t offset);

/* ---- the JIT and launches */
/* `target` NULL or "": the GPU's. EF_RUNTIME_ERROR when there is no compiler. */
int ef_jit_new(const char* target, ef_jit** out);
/* A Jit that loads and launches on GPU `device` (a CUDA or HIP ordinal; an
 * empty target means that device's). Launches leave the calling thread's
 * current device as it was. EF_USER_ERROR for a device that does not exist. */
int ef_jit_new_on_device(const char* target, int device, ef_jit** out);
void ef_jit_free(ef_jit* jit);
/* The Jit's target ("sm_90a"), valid while the Jit lives. */
const char* ef_jit_target(const ef_jit* jit);
/* Compiles (or finds) the kernel for (m, n, k); `tile` NULL or "" for the tuned
 * or default tile, else a tile string ("h128x256x64s4g8"). */
int ef_jit_compile(ef_jit* jit, const ef_spec* spec, int64_t m, int64_t n, int64_t k, const char* tile,
                   ef_kernel** out);
/* ef_jit_compile for strided tensors (docs/strided-batched.md), of any chain:
 * ld[i] is the leading dimension of binding i in ef_kernel_bindings' order,
 * the inputs (a GEMM chain's operands first: a, b or a, b0, b1; then the
 * chain's inputs; an elementwise chain has no operands)
 * and then the outputs: the elements between its stored rows (a column-major
 * operand's columns); 0, or the dense rows' length (a chain tensor's N), is
 * dense, and bindings past nld are dense. GEMM operands and full [M,N] chain
 * inputs and outputs take one; an ld on any other tensor, below the rows'
 * length, or on a chain tensor of a batched GEMM is EF_USER_ERROR naming the
 * tensor. The kernel is a strided variant for each tensor with an ld (the
 * flag is in the cache key, the value is not), and launches with an ld of the
 * same kind (ef_launch's ld). nld 0: ef_jit_compile. */
int ef_jit_compile_ld(ef_jit* jit, const ef_spec* spec, int64_t m, int64_t n, int64_t k, const int64_t* ld,
                      size_t nld, const char* tile, ef_kernel** out);
/* ef_jit_compile_ld for a batched GEMM (docs/strided-batched.md, "Built:
 * batched GEMM"): `batch` problems of (m, n, k) in one launch; 0 or 1 is
 * unbatched. batch_stride[i] is the elements between batches of GEMM operand
 * i (a, b or a, b0, b1): -1 its own size (batches back to back), 0 one matrix
 * shared by every batch, else at least its size; NULL and 0 is -1 for every
 * operand. Full [M,N] inputs and outputs are [batch, M, N] back to back; row
 * and column inputs are shared. A chain with a column-sum output, a batch
 * above 65535 or overlapping batches are EF_USER_ERROR naming the cause. The
 * kernel is a batched variant (the flag is in the cache key, the count and
 * the strides are not) and launches with ef_launch's batch fields. */
int ef_jit_compile_batched(ef_jit* jit, const ef_spec* spec, int64_t m, int64_t n, int64_t k, const int64_t* ld,
                           size_t nld, int64_t batch, const int64_t* batch_stride, size_t nbatch_stride,
                           const char* tile, ef_kernel** out);
void ef_kernel_free(ef_kernel* kernel);
/* Times every tile candidate of the kernel for (m, n, k) on the given device
 * buffers (pointers in ef_kernel_bindings' order, which every tile of a shape
 * shares; outputs are overwritten) on the default stream of the Jit's device,
 * and keeps the fastest: later ef_jit_compile calls without a tile use it, in
 * this process and, through the disk cache, in later ones. Waits for the
 * device before returning. *result: {"tile", "ms", "candidates"} as JSON
 * (ef_string_free it). */
int ef_jit_tune(ef_jit* jit, const ef_spec* spec, int64_t m, int64_t n, int64_t k, const uint64_t* inputs,
                size_t ninputs, const uint64_t* outputs, size_t noutputs, uint64_t seed, uint64_t offset,
                char** result);
/* The order ef_jit_launch binds device pointers in, as JSON:
 * {"inputs": ["a", "b", "bias"], "outputs": ["y"], "tile": "...", "name": "..."}. */
int ef_kernel_bindings(const ef_kernel* kernel, char** out);
/* Launches asynchronously on `stream` (NULL: the default stream). Pointers in
 * ef_kernel_bindings' order; device buffers in the device layout (a
 * column-major GEMM operand is its transpose, row-major). */
int ef_jit_launch(const ef_jit* jit, const ef_kernel* kernel, const uint64_t* inputs, size_t ninputs,
                  const uint64_t* outputs, size_t noutputs, int64_t m, int64_t n, int64_t k, uint64_t seed,
                  uint64_t offset, void* stream);

/* The same launch as one record, for callers that keep it per shape and change
 * only what varies (pointers, seed, offset, stream): one argument to convert
 * instead of twelve (the Python module's hot path, docs/python.md). */
typedef struct ef_launch {
  const ef_jit* jit;
  const ef_kernel* kernel;
  const uint64_t* inputs;
  size_t ninputs;
  const uint64_t* outputs;
  size_t noutputs;
  int64_t m, n, k;
  uint64_t seed, offset;
  void* stream;
  /* 0, or a device pointer to two uint64 {seed, offset base} that a dropout
   * kernel reads on the device (seed is then unused and the base is added to
   * offset): a launch captured in a CUDA graph then draws what the graph
   * writes there at each replay. */
  uint64_t rng_state;
  /* NULL and 0, or the leading dimensions of the bindings (inputs, then
   * outputs) as ef_jit_compile_ld takes them: a launch of a strided kernel
   * gives each strided tensor's ld (its value may change from launch to
   * launch, its kind may not). Appended: a caller that zeroes the record keeps
   * launching dense kernels unchanged. */
  const int64_t* ld;
  size_t nld;
  /* 0 (or 1) and NULL and 0, or a batched kernel's batch count and its GEMM
   * operands' batch strides as ef_jit_compile_batched takes them (the values
   * may change from launch to launch; batched or not may not). Appended: a
   * zeroed record is an unbatched launch, as before. */
  int64_t batch;
  const int64_t* batch_stride;
  size_t nbatch_stride;
} ef_launch;
int ef_launch_record(const ef_launch* launch);

#ifdef __cplusplus
}
#endif

#endif /* EPIFUSE_C_API_H */
