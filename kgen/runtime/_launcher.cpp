// kgen's kernel launcher: loads code objects and launches kernels through the CUDA driver API or
// HIP's module API, from Python; built once per machine by kgen/runtime/launcher.py (which says
// what each function does). It needs no CUDA or ROCm headers or libraries to build: it dlopen()s
// libcuda.so.1 or libamdhip64.so when first used and declares the prototypes and enums it needs.
// Sources: CUDA 13.0 cuda.h and the CUDA Driver API reference (docs.nvidia.com/cuda/
// cuda-driver-api); HIP's hip_runtime_api.h (ROCm 5.2) and ROCm's HIP "Module management"
// reference. The values and signatures used are the same in every version since CUDA 11 / ROCm 5.
#include <dlfcn.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <type_traits>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

namespace py = pybind11;

namespace {

// ---- CUDA driver API (cuda.h) ----------------------------------------------------------------
typedef int CUresult;  // enum cudaError_enum
typedef int CUdevice;  // typedef int CUdevice_v1
typedef struct CUctx_st* CUcontext;
typedef struct CUmod_st* CUmodule;
typedef struct CUfunc_st* CUfunction;
typedef struct CUstream_st* CUstream;
constexpr CUresult CUDA_SUCCESS = 0, CUDA_ERROR_INVALID_IMAGE = 200, CUDA_ERROR_NO_BINARY_FOR_GPU = 209;
constexpr int CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8;  // enum CUfunction_attribute
constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75;    // enum CUdevice_attribute
constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76;

#define KGEN_CUDA_FUNCS(X)                                                                        \
  X(CUresult, cuInit, (unsigned int Flags))                                                       \
  X(CUresult, cuDeviceGet, (CUdevice * device, int ordinal))                                      \
  X(CUresult, cuDeviceGetAttribute, (int* pi, int attrib, CUdevice dev))                          \
  X(CUresult, cuCtxGetCurrent, (CUcontext * pctx))                                                \
  X(CUresult, cuCtxSetCurrent, (CUcontext ctx))                                                   \
  X(CUresult, cuCtxGetDevice, (CUdevice * device))                                                \
  X(CUresult, cuDevicePrimaryCtxRetain, (CUcontext * pctx, CUdevice dev))                         \
  X(CUresult, cuModuleLoadData, (CUmodule * module, const void* image))                           \
  X(CUresult, cuModuleGetFunction, (CUfunction * hfunc, CUmodule hmod, const char* name))         \
  X(CUresult, cuFuncSetAttribute, (CUfunction hfunc, int attrib, int value))                      \
  X(CUresult, cuLaunchKernel,                                                                     \
    (CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,           \
     unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,                      \
     unsigned int sharedMemBytes, CUstream hStream, void** kernelParams, void** extra))           \
  X(CUresult, cuGetErrorString, (CUresult error, const char** pStr))                              \
  X(CUresult, cuGetErrorName, (CUresult error, const char** pStr))

// cuTensorMapEncodeTiled (CUDA 12.0+): looked up when first used, so that an older driver still
// runs the kernels that take no tensor map. Enum values from cuda.h (CUtensorMapDataType,
// CUtensorMapInterleave, CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill).
struct alignas(128) TensorMap { uint64_t opaque[16]; };  // CUtensorMap
typedef CUresult (*EncodeTiledFn)(TensorMap* map, int dtype, uint32_t rank, void* address, const uint64_t* dims,
                                  const uint64_t* strides, const uint32_t* box, const uint32_t* element_strides,
                                  int interleave, int swizzle, int l2_promotion, int oob_fill);
constexpr int CU_TENSOR_MAP_DATA_TYPE_UINT8 = 0, CU_TENSOR_MAP_DATA_TYPE_UINT16 = 1, CU_TENSOR_MAP_DATA_TYPE_UINT32 = 2;
constexpr int CU_TENSOR_MAP_INTERLEAVE_NONE = 0, CU_TENSOR_MAP_SWIZZLE_128B = 3, CU_TENSOR_MAP_L2_PROMOTION_L2_256B = 3,
              CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE = 0;  // FILL_NONE: elements out of bounds read as zeros
constexpr size_t kMaxTensorMaps = 8;

// ---- HIP module API (hip_runtime_api.h) ------------------------------------------------------
typedef int hipError_t;  // enum hipError_t
typedef struct ihipModule_t* hipModule_t;
typedef struct ihipModuleSymbol_t* hipFunction_t;
typedef struct ihipStream_t* hipStream_t;
constexpr hipError_t hipSuccess = 0, hipErrorInvalidDeviceFunction = 98, hipErrorInvalidImage = 200,
                     hipErrorNoBinaryForGpu = 209;
constexpr int hipFuncAttributeMaxDynamicSharedMemorySize = 8;  // enum hipFuncAttribute

#define KGEN_HIP_FUNCS(X)                                                                         \
  X(hipError_t, hipInit, (unsigned int flags))                                                    \
  X(hipError_t, hipGetDevice, (int* deviceId))                                                    \
  X(hipError_t, hipModuleLoadData, (hipModule_t * module, const void* image))                     \
  X(hipError_t, hipModuleGetFunction, (hipFunction_t * function, hipModule_t module, const char* kname)) \
  X(hipError_t, hipFuncSetAttribute, (const void* func, int attr, int value))                     \
  X(hipError_t, hipModuleLaunchKernel,                                                            \
    (hipFunction_t f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,        \
     unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,                      \
     unsigned int sharedMemBytes, hipStream_t stream, void** kernelParams, void** extra))         \
  X(const char*, hipGetErrorString, (hipError_t hipError))                                        \
  X(const char*, hipGetErrorName, (hipError_t hip_error))

// The loaded library, whether cuInit(0) / hipInit(0) succeeded, and a pointer per function.
#define KGEN_MEMBER(ret, name, args) ret(*name) args = nullptr;
struct CudaApi { void* lib = nullptr; bool initialized = false; KGEN_CUDA_FUNCS(KGEN_MEMBER) } g_cuda;
struct HipApi { void* lib = nullptr; bool initialized = false; KGEN_HIP_FUNCS(KGEN_MEMBER) } g_hip;
// Every image given to load_module, kept for the life of the process (modules are never unloaded).
auto* g_images = new std::unordered_map<uintptr_t, std::string>();

struct WrongGpu : std::runtime_error { using std::runtime_error::runtime_error; };

enum class Backend { Cuda, Hip };

Backend parse_backend(const std::string& name) {
  if (name == "cuda") return Backend::Cuda;
  if (name == "hip") return Backend::Hip;
  throw py::value_error("backend must be 'cuda' or 'hip', not '" + name + "'");
}

std::string device_arch_impl(Backend b);

// "<api> error N (NAME): <text> in <where>"; a code object for another GPU raises WrongGpu.
[[noreturn]] void raise_driver_error(Backend b, int r, const char* name, const char* text,
                                     const char* where) {
  std::string msg = std::string(b == Backend::Cuda ? "cuda" : "hip") + " error " +
                    std::to_string(r) + " (" + (name ? name : "unknown") + "): " +
                    (text ? text : "unknown error") + " in " + where;
  bool invalid_image = b == Backend::Cuda ? r == CUDA_ERROR_INVALID_IMAGE : r == hipErrorInvalidImage;
  if (!invalid_image && r != (b == Backend::Cuda ? CUDA_ERROR_NO_BINARY_FOR_GPU : hipErrorNoBinaryForGpu))
    throw std::runtime_error(msg);
  std::string arch;
  if (b == Backend::Cuda) try { arch = device_arch_impl(b); } catch (...) {}
  msg += ": the code object was built for a different GPU than this one";
  if (!arch.empty()) msg += " (this GPU is " + arch + ")";
  if (invalid_image) msg += ", or it is not a valid code object";
  throw WrongGpu(msg);
}

inline void check_cuda(CUresult r, const char* where) {
  if (r == CUDA_SUCCESS) return;
  const char *name = nullptr, *text = nullptr;
  if (g_cuda.cuGetErrorName(r, &name) != CUDA_SUCCESS) name = nullptr;
  if (g_cuda.cuGetErrorString(r, &text) != CUDA_SUCCESS) text = nullptr;
  raise_driver_error(Backend::Cuda, r, name, text, where);
}

inline void check_hip(hipError_t r, const char* where) {
  if (r == hipSuccess) return;
  raise_driver_error(Backend::Hip, r, g_hip.hipGetErrorName(r), g_hip.hipGetErrorString(r), where);
}

CudaApi& driver_init(CudaApi& api) {
  check_cuda(api.cuInit(0), "cuInit");
  api.initialized = true;
  return api;
}
HipApi& driver_init(HipApi& api) {
  check_hip(api.hipInit(0), "hipInit");
  api.initialized = true;
  return api;
}

// The driver table, ready: on first use dlopen the first of `names` that loads and look up every
// symbol (or raise naming the library), then call cuInit(0) / hipInit(0) until it succeeds.
template <typename Api>
Api& driver(Api& api, std::initializer_list<const char*> names, const char* what) {
  if (api.initialized) return api;
  if (api.lib != nullptr) return driver_init(api);
  void* lib = nullptr;
  std::string error;
  for (const char* name : names) {
    if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL)) != nullptr) break;
    const char* e = dlerror();
    if (error.empty() && e) error = e;
  }
  if (lib == nullptr)
    throw std::runtime_error("could not load " + std::string(*names.begin()) + ", " + what + ": " +
                             error);
  Api loaded;
  auto sym = [&](const char* symbol) {
    void* p = dlsym(lib, symbol);
    if (p == nullptr)
      throw std::runtime_error(std::string(*names.begin()) + " has no symbol " + symbol +
                               " (is the driver too old?)");
    return p;
  };
#define KGEN_BIND(ret, name, args) loaded.name = reinterpret_cast<ret(*) args>(sym(#name));
  if constexpr (std::is_same_v<Api, CudaApi>) { KGEN_CUDA_FUNCS(KGEN_BIND) }
  else { KGEN_HIP_FUNCS(KGEN_BIND) }
  loaded.lib = lib;
  api = loaded;
  return driver_init(api);
}

CudaApi& cuda() {
  return driver(g_cuda, {"libcuda.so.1"}, "the CUDA driver library (is an NVIDIA driver installed?)");
}
HipApi& hip() {  // the plain name is the -dev package's symlink; runtime-only installs lack it
  return driver(g_hip, {"libamdhip64.so", "libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5"},
                "the HIP runtime library (is ROCm installed?)");
}

// Make a CUDA context current on this thread if none is: the primary context of device 0.
// (PyTorch makes its current device's primary context current, so normally one already is.)
CudaApi& cuda_with_context() {
  CudaApi& api = cuda();
  CUcontext ctx = nullptr;
  check_cuda(api.cuCtxGetCurrent(&ctx), "cuCtxGetCurrent");
  if (ctx != nullptr) return api;
  CUdevice dev = 0;
  check_cuda(api.cuDeviceGet(&dev, 0), "cuDeviceGet");
  check_cuda(api.cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  check_cuda(api.cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  return api;
}

// CUDA: 'sm_XY' from the current device's compute capability. HIP: always '': the name (gfx942..)
// is only in hipDeviceProp_t, whose layout changes between ROCm versions; an int attribute cannot
// carry it (hipDeviceAttributeGcnArch is a deprecated number). PyTorch has it: gcnArchName.
std::string device_arch_impl(Backend b) {
  if (b == Backend::Hip) return "";
  CudaApi& api = cuda_with_context();
  CUdevice dev = 0;
  int major = 0, minor = 0;
  check_cuda(api.cuCtxGetDevice(&dev), "cuCtxGetDevice");
  check_cuda(api.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev),
             "cuDeviceGetAttribute");
  check_cuda(api.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev),
             "cuDeviceGetAttribute");
  return "sm_" + std::to_string(major) + std::to_string(minor);
}

// ---- argument packing ------------------------------------------------------------------------
// 256 arguments of at most 8 bytes stay within the 4 KiB of kernel parameters that CUDA and HIP
// both accept (CUDA C++ Programming Guide, "Function Parameters"); ssd_bwd's widest kernel takes 106
constexpr size_t kMaxArgs = 256;

struct PackedArgs {
  alignas(128) unsigned char storage[kMaxArgs * 8 + kMaxTensorMaps * sizeof(TensorMap)];
  void* ptrs[kMaxArgs];
  size_t size = 0;  // bytes of storage used (no trailing padding)
};

// Raises a TypeError / OverflowError naming the argument: of the kind of the pending conversion
// error if there is one (any other pending exception, say from __index__, propagates), else `exc`.
[[noreturn]] void arg_error(PyObject* exc, size_t i, char kind, PyObject* value, const char* want) {
  if (PyErr_Occurred()) {
    if (PyErr_ExceptionMatches(PyExc_OverflowError)) exc = PyExc_OverflowError;
    else if (PyErr_ExceptionMatches(PyExc_TypeError)) exc = PyExc_TypeError;
    else throw py::error_already_set();
    PyErr_Clear();
  }
  PyErr_Format(exc, "kernel argument %zd (signature '%c') must be %s, got %R", (Py_ssize_t)i, kind,
               want, value);
  throw py::error_already_set();
}

long long as_int(PyObject* v, size_t i, char kind, long long lo, long long hi, const char* want) {
  long long x = PyLong_AsLongLong(v);
  if ((x == -1 && PyErr_Occurred()) || x < lo || x > hi)
    arg_error(PyExc_OverflowError, i, kind, v, want);
  return x;
}

uint64_t as_pointer(PyObject* v, size_t i) {
  if (v == Py_None) return 0;
  if (!PyLong_Check(v)) arg_error(PyExc_TypeError, i, 'p', v, "an int address or None");
  unsigned long long p = PyLong_AsUnsignedLongLong(v);
  if (p == (unsigned long long)-1 && PyErr_Occurred())
    arg_error(PyExc_OverflowError, i, 'p', v, "a 64-bit address");
  return p;
}

template <typename T>
inline void put(PackedArgs& out, size_t i, T value) {
  size_t off = (out.size + alignof(T) - 1) & ~(alignof(T) - 1);
  if (off > out.size) std::memset(out.storage + out.size, 0, off - out.size);
  std::memcpy(out.storage + off, &value, sizeof(T));
  out.ptrs[i] = out.storage + off;
  out.size = off + sizeof(T);
}

// Packs `args` (a tuple or list) by `sig`: 'p' pointer (int address, or None for null),
// 'i' int32, 'l' int64, 'f' float32. Each value sits at its natural alignment, as in a C struct,
// and ptrs[k] points at argument k: what cuLaunchKernel's kernelParams wants.
void pack_args(const std::string& sig, PyObject* args, PackedArgs& out) {
  size_t n = sig.size();
  if (n > kMaxArgs) throw py::value_error("a kernel takes at most " + std::to_string(kMaxArgs) + " arguments here, got " + std::to_string(n));
  if (!PyTuple_Check(args) && !PyList_Check(args))
    throw py::type_error("kernel arguments must be a tuple or a list");
  if ((size_t)PySequence_Fast_GET_SIZE(args) != n)
    throw py::type_error("the signature '" + sig + "' names " + std::to_string(n) +
                         " arguments but " + std::to_string(PySequence_Fast_GET_SIZE(args)) +
                         " were given");
  PyObject** items = PySequence_Fast_ITEMS(args);
  out.size = 0;
  size_t maps = 0;
  for (size_t i = 0; i < n; ++i) {
    PyObject* v = items[i];
    switch (sig[i]) {
      case 'p': put<uint64_t>(out, i, as_pointer(v, i)); break;
      case 'i': put<int32_t>(out, i, (int32_t)as_int(v, i, 'i', INT32_MIN, INT32_MAX, "an int32")); break;
      case 'l': put<int64_t>(out, i, as_int(v, i, 'l', INT64_MIN, INT64_MAX, "an int64")); break;
      case 'f': {
        double x = PyFloat_AsDouble(v);
        if (x == -1.0 && PyErr_Occurred()) arg_error(PyExc_TypeError, i, 'f', v, "a float");
        put<float>(out, i, (float)x);
        break;
      }
      case 'T': {
        char* data = nullptr;
        Py_ssize_t len = 0;
        if (!PyBytes_Check(v) || PyBytes_AsStringAndSize(v, &data, &len) != 0 || len != (Py_ssize_t)sizeof(TensorMap))
          arg_error(PyExc_TypeError, i, 'T', v, "the 128 bytes of a tensor map");
        if (++maps > kMaxTensorMaps)
          throw py::value_error("a kernel takes at most " + std::to_string(kMaxTensorMaps) + " tensor maps here");
        TensorMap m;
        std::memcpy(&m, data, sizeof m);
        put<TensorMap>(out, i, m);
        break;
      }
      default:
        throw py::value_error(std::string("unknown signature character '") + sig[i] +
                              "' (use p = pointer, i = int32, l = int64, f = float32, T = tensor map)");
    }
  }
}

void read_dim3(py::handle seq, const char* what, unsigned int out[3]) {
  PyObject* o = seq.ptr();
  if ((!PyTuple_Check(o) && !PyList_Check(o)) || PySequence_Fast_GET_SIZE(o) != 3)
    throw py::type_error(std::string(what) + " must be a tuple of 3 ints");
  for (int k = 0; k < 3; ++k) {
    long long x = PyLong_AsLongLong(PySequence_Fast_ITEMS(o)[k]);
    if ((x == -1 && PyErr_Occurred()) || x < 1 || x > UINT32_MAX) {
      PyErr_Clear();
      throw py::value_error(std::string(what) + " must be 3 ints >= 1, got " +
                            py::repr(seq).cast<std::string>());
    }
    out[k] = (unsigned int)x;
  }
}

uintptr_t load_module(const std::string& backend, py::bytes image) {
  Backend b = parse_backend(backend);
  std::string data = image;  // our own copy, kept for the module's life
  void* mod = nullptr;
  if (b == Backend::Cuda)
    check_cuda(cuda_with_context().cuModuleLoadData((CUmodule*)&mod, data.data()), "cuModuleLoadData");
  else
    check_hip(hip().hipModuleLoadData((hipModule_t*)&mod, data.data()), "hipModuleLoadData");
  (*g_images)[(uintptr_t)mod] = std::move(data);
  return (uintptr_t)mod;
}

uintptr_t get_function(const std::string& backend, uintptr_t module, const std::string& name) {
  void* f = nullptr;
  std::string where = "ModuleGetFunction('" + name + "')";
  if (parse_backend(backend) == Backend::Cuda)
    check_cuda(cuda().cuModuleGetFunction((CUfunction*)&f, (CUmodule)module, name.c_str()),
               ("cu" + where).c_str());
  else
    check_hip(hip().hipModuleGetFunction((hipFunction_t*)&f, (hipModule_t)module, name.c_str()),
              ("hip" + where).c_str());
  return (uintptr_t)f;
}

void set_max_dynamic_shared(const std::string& backend, uintptr_t func, int nbytes) {
  if (parse_backend(backend) == Backend::Cuda)
    return check_cuda(cuda().cuFuncSetAttribute((CUfunction)func, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, nbytes),
                      "cuFuncSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)");
  // AMD GPUs need no opt-in (a kernel may use all of the LDS), and hipFuncSetAttribute knows only
  // kernels registered by the host program, so it may reject a module's function: that is fine.
  hipError_t r = hip().hipFuncSetAttribute((const void*)func, hipFuncAttributeMaxDynamicSharedMemorySize, nbytes);
  if (r != hipErrorInvalidDeviceFunction) check_hip(r, "hipFuncSetAttribute(hipFuncAttributeMaxDynamicSharedMemorySize)");
}

void launch(const std::string& backend, uintptr_t func, py::handle grid, py::handle block,
            unsigned int shared_bytes, uintptr_t stream, const std::string& signature,
            py::handle args) {
  Backend b = parse_backend(backend);
  unsigned int g[3], k[3];
  read_dim3(grid, "grid", g);
  read_dim3(block, "block", k);
  PackedArgs packed;
  pack_args(signature, args.ptr(), packed);
  int r;
  if (b == Backend::Cuda) {
    CudaApi& api = cuda();
    py::gil_scoped_release release;  // the call may block (on a full launch queue)
    r = api.cuLaunchKernel((CUfunction)func, g[0], g[1], g[2], k[0], k[1], k[2], shared_bytes,
                           (CUstream)stream, packed.ptrs, nullptr);
  } else {
    HipApi& api = hip();
    py::gil_scoped_release release;
    r = api.hipModuleLaunchKernel((hipFunction_t)func, g[0], g[1], g[2], k[0], k[1], k[2],
                                  shared_bytes, (hipStream_t)stream, packed.ptrs, nullptr);
  }
  b == Backend::Cuda ? check_cuda(r, "cuLaunchKernel") : check_hip(r, "hipModuleLaunchKernel");
}

int current_device(const std::string& backend) {
  int dev = 0;
  if (parse_backend(backend) == Backend::Cuda)
    check_cuda(cuda_with_context().cuCtxGetDevice(&dev), "cuCtxGetDevice");
  else
    check_hip(hip().hipGetDevice(&dev), "hipGetDevice");
  return dev;
}

// A tensor map of a `rank`-dim tensor (dims and byte strides innermost first, strides of dims 1
// on) read in boxes of `box` elements, into the 128-byte swizzle, out-of-bounds elements zero.
py::bytes encode_tensor_map(uint64_t address, int elem_bytes, std::vector<uint64_t> dims, std::vector<uint64_t> strides,
                            std::vector<uint32_t> box) {
  // the arguments first: a wrong call says so on any machine, before the driver is looked for
  size_t rank = dims.size();
  if (rank < 1 || rank > 5 || strides.size() != rank - 1 || box.size() != rank)
    throw py::value_error("a tensor map takes 1 to 5 dims, a stride for each but the first, and a box dim for each");
  int dtype = elem_bytes == 1 ? CU_TENSOR_MAP_DATA_TYPE_UINT8 : elem_bytes == 2 ? CU_TENSOR_MAP_DATA_TYPE_UINT16
            : elem_bytes == 4 ? CU_TENSOR_MAP_DATA_TYPE_UINT32 : -1;
  if (dtype < 0) throw py::value_error("tensor map elements must be 1, 2 or 4 bytes, not " + std::to_string(elem_bytes));
  static EncodeTiledFn encode = nullptr;
  CudaApi& api = cuda_with_context();
  if (encode == nullptr) {
    encode = reinterpret_cast<EncodeTiledFn>(dlsym(api.lib, "cuTensorMapEncodeTiled"));
    if (encode == nullptr) throw std::runtime_error("libcuda.so.1 has no symbol cuTensorMapEncodeTiled (a CUDA 12 driver is needed)");
  }
  std::vector<uint32_t> ones(rank, 1);
  TensorMap m;
  check_cuda(encode(&m, dtype, (uint32_t)rank, reinterpret_cast<void*>(address), dims.data(), strides.data(), box.data(),
                    ones.data(), CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                    CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
             "cuTensorMapEncodeTiled");
  return py::bytes(reinterpret_cast<const char*>(&m), sizeof m);
}

py::bytes pack_args_for_test(const std::string& signature, py::handle args) {
  PackedArgs packed;
  pack_args(signature, args.ptr(), packed);
  return py::bytes(reinterpret_cast<const char*>(packed.storage), packed.size);
}

}  // namespace

PYBIND11_MODULE(_kgen_launcher, m) {
  m.doc() = "kgen's kernel launcher: CUDA driver API / HIP module API, dlopen'ed at run time.";
  py::register_exception<WrongGpu>(m, "WrongGpuError", PyExc_RuntimeError);
  m.attr("MAX_ARGS") = kMaxArgs;
  // What each does: see kgen/runtime/launcher.py.
  m.def("load_module", &load_module, py::arg("backend"), py::arg("image"));
  m.def("get_function", &get_function, py::arg("backend"), py::arg("module"), py::arg("name"));
  m.def("set_max_dynamic_shared", &set_max_dynamic_shared, py::arg("backend"), py::arg("func"),
        py::arg("nbytes"));
  m.def("launch", &launch, py::arg("backend"), py::arg("func"), py::arg("grid"), py::arg("block"),
        py::arg("shared_bytes"), py::arg("stream"), py::arg("signature"), py::arg("args"));
  m.def("current_device", &current_device, py::arg("backend"));
  m.def("device_arch", [](const std::string& b) { return device_arch_impl(parse_backend(b)); },
        py::arg("backend"));
  m.def("encode_tensor_map", &encode_tensor_map, py::arg("address"), py::arg("elem_bytes"), py::arg("dims"),
        py::arg("strides"), py::arg("box"));
  m.def("pack_args_for_test", &pack_args_for_test, py::arg("signature"), py::arg("args"));
}
