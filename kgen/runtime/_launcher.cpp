// kgen's kernel launcher: loads code objects and launches kernels through the CUDA driver API or
// HIP's module API, from Python. Built once per machine by kgen/runtime/launcher.py with
//   g++ -O2 -shared -fPIC -std=c++17 $(python -m pybind11 --includes) _launcher.cpp
//       -o _kgen_launcher$(python3-config --extension-suffix) -ldl
// It needs no CUDA or ROCm headers or libraries to build: it dlopen()s libcuda.so.1 or
// libamdhip64.so at run time and declares the few prototypes and enum values it uses below.
// Sources of those declarations: CUDA 13.0 cuda.h (/usr/local/cuda-13.0/include/cuda.h) and the
// CUDA Driver API reference; HIP 5.2 hip_runtime_api.h (/usr/include/hip) and ROCm's HIP "Module
// management" reference. The ones used have the same values and signatures in later versions.
#include <pybind11/pybind11.h>

#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <unordered_map>

namespace py = pybind11;

namespace {

// ---- CUDA driver API (cuda.h) --------------------------------------------------------------
typedef int CUresult;  // enum cudaError_enum
typedef int CUdevice;  // typedef int CUdevice_v1
typedef struct CUctx_st* CUcontext;
typedef struct CUmod_st* CUmodule;
typedef struct CUfunc_st* CUfunction;
typedef struct CUstream_st* CUstream;
constexpr CUresult CUDA_SUCCESS = 0;
constexpr CUresult CUDA_ERROR_INVALID_IMAGE = 200;
constexpr CUresult CUDA_ERROR_NO_BINARY_FOR_GPU = 209;
constexpr int CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8;  // enum CUfunction_attribute
constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75;    // enum CUdevice_attribute
constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76;

struct CudaApi {
  void* lib = nullptr;
  bool initialized = false;  // cuInit(0) succeeded
  CUresult (*cuInit)(unsigned int Flags);
  CUresult (*cuDeviceGet)(CUdevice* device, int ordinal);
  CUresult (*cuDeviceGetAttribute)(int* pi, int attrib, CUdevice dev);
  CUresult (*cuCtxGetCurrent)(CUcontext* pctx);
  CUresult (*cuCtxSetCurrent)(CUcontext ctx);
  CUresult (*cuCtxGetDevice)(CUdevice* device);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext* pctx, CUdevice dev);
  CUresult (*cuModuleLoadData)(CUmodule* module, const void* image);
  CUresult (*cuModuleGetFunction)(CUfunction* hfunc, CUmodule hmod, const char* name);
  CUresult (*cuFuncSetAttribute)(CUfunction hfunc, int attrib, int value);
  CUresult (*cuLaunchKernel)(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                             unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                             unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                             void** kernelParams, void** extra);
  CUresult (*cuGetErrorString)(CUresult error, const char** pStr);
  CUresult (*cuGetErrorName)(CUresult error, const char** pStr);
};

// ---- HIP module API (hip_runtime_api.h) ------------------------------------------------------
typedef int hipError_t;  // enum hipError_t
typedef struct ihipModule_t* hipModule_t;
typedef struct ihipModuleSymbol_t* hipFunction_t;
typedef struct ihipStream_t* hipStream_t;
constexpr hipError_t hipSuccess = 0;
constexpr hipError_t hipErrorInvalidDeviceFunction = 98;
constexpr hipError_t hipErrorInvalidImage = 200;
constexpr hipError_t hipErrorNoBinaryForGpu = 209;
constexpr int hipFuncAttributeMaxDynamicSharedMemorySize = 8;  // enum hipFuncAttribute

struct HipApi {
  void* lib = nullptr;
  bool initialized = false;
  hipError_t (*hipInit)(unsigned int flags);
  hipError_t (*hipGetDevice)(int* deviceId);
  hipError_t (*hipModuleLoadData)(hipModule_t* module, const void* image);
  hipError_t (*hipModuleGetFunction)(hipFunction_t* function, hipModule_t module, const char* kname);
  hipError_t (*hipFuncSetAttribute)(const void* func, int attr, int value);
  hipError_t (*hipModuleLaunchKernel)(hipFunction_t f, unsigned int gridDimX, unsigned int gridDimY,
                                      unsigned int gridDimZ, unsigned int blockDimX,
                                      unsigned int blockDimY, unsigned int blockDimZ,
                                      unsigned int sharedMemBytes, hipStream_t stream,
                                      void** kernelParams, void** extra);
  const char* (*hipGetErrorString)(hipError_t error);
  const char* (*hipGetErrorName)(hipError_t error);
};

CudaApi g_cuda;
HipApi g_hip;
// Every image given to load_module, kept alive for the life of the process (modules are never
// unloaded), keyed by module handle.
std::unordered_map<uintptr_t, std::string>* g_images = new std::unordered_map<uintptr_t, std::string>();

struct WrongGpu : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class Backend { Cuda, Hip };

Backend parse_backend(const std::string& name) {
  if (name == "cuda") return Backend::Cuda;
  if (name == "hip") return Backend::Hip;
  throw py::value_error("backend must be 'cuda' or 'hip', not '" + name + "'");
}

template <typename F>
void bind(void* lib, const char* libname, const char* symbol, F*& out) {
  void* p = dlsym(lib, symbol);
  if (p == nullptr)
    throw std::runtime_error(std::string(libname) + " has no symbol " + symbol +
                             " (driver too old?)");
  out = reinterpret_cast<F*>(p);
}

std::string device_arch_impl(Backend b);

// ---- errors ----------------------------------------------------------------------------------
[[noreturn]] void raise_cuda(CUresult r, const char* where) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (g_cuda.cuGetErrorName == nullptr || g_cuda.cuGetErrorName(r, &name) != CUDA_SUCCESS) name = nullptr;
  if (g_cuda.cuGetErrorString == nullptr || g_cuda.cuGetErrorString(r, &text) != CUDA_SUCCESS) text = nullptr;
  std::string msg = "cuda error " + std::to_string(r) + " (" + (name ? name : "unknown") +
                    "): " + (text ? text : "unknown error") + " in " + where;
  if (r == CUDA_ERROR_NO_BINARY_FOR_GPU || r == CUDA_ERROR_INVALID_IMAGE) {
    std::string arch;
    try { arch = device_arch_impl(Backend::Cuda); } catch (...) {}
    msg += ": the code object was built for a different GPU than this one" +
           (arch.empty() ? std::string() : " (this GPU is " + arch + ")") +
           (r == CUDA_ERROR_INVALID_IMAGE ? ", or it is not a valid code object" : "");
    throw WrongGpu(msg);
  }
  throw std::runtime_error(msg);
}

[[noreturn]] void raise_hip(hipError_t r, const char* where) {
  const char* name = g_hip.hipGetErrorName ? g_hip.hipGetErrorName(r) : nullptr;
  const char* text = g_hip.hipGetErrorString ? g_hip.hipGetErrorString(r) : nullptr;
  std::string msg = "hip error " + std::to_string(r) + " (" + (name ? name : "unknown") +
                    "): " + (text ? text : "unknown error") + " in " + where;
  if (r == hipErrorNoBinaryForGpu || r == hipErrorInvalidImage) {
    msg += ": the code object was built for a different GPU than this one";
    if (r == hipErrorInvalidImage) msg += ", or it is not a valid code object";
    throw WrongGpu(msg);
  }
  throw std::runtime_error(msg);
}

inline void check_cuda(CUresult r, const char* where) {
  if (r != CUDA_SUCCESS) raise_cuda(r, where);
}
inline void check_hip(hipError_t r, const char* where) {
  if (r != hipSuccess) raise_hip(r, where);
}

// ---- loading the driver library ----------------------------------------------------------------
CudaApi& cuda() {
  if (g_cuda.initialized) return g_cuda;
  if (g_cuda.lib == nullptr) {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* err = dlerror();
      throw std::runtime_error(std::string("could not load libcuda.so.1, the CUDA driver library "
                                           "(is an NVIDIA driver installed?): ") +
                               (err ? err : "dlopen failed"));
    }
    const char* n = "libcuda.so.1";
    CudaApi api;
    bind(lib, n, "cuInit", api.cuInit);
    bind(lib, n, "cuDeviceGet", api.cuDeviceGet);
    bind(lib, n, "cuDeviceGetAttribute", api.cuDeviceGetAttribute);
    bind(lib, n, "cuCtxGetCurrent", api.cuCtxGetCurrent);
    bind(lib, n, "cuCtxSetCurrent", api.cuCtxSetCurrent);
    bind(lib, n, "cuCtxGetDevice", api.cuCtxGetDevice);
    bind(lib, n, "cuDevicePrimaryCtxRetain", api.cuDevicePrimaryCtxRetain);
    bind(lib, n, "cuModuleLoadData", api.cuModuleLoadData);
    bind(lib, n, "cuModuleGetFunction", api.cuModuleGetFunction);
    bind(lib, n, "cuFuncSetAttribute", api.cuFuncSetAttribute);
    bind(lib, n, "cuLaunchKernel", api.cuLaunchKernel);
    bind(lib, n, "cuGetErrorString", api.cuGetErrorString);
    bind(lib, n, "cuGetErrorName", api.cuGetErrorName);
    api.lib = lib;
    g_cuda = api;
  }
  check_cuda(g_cuda.cuInit(0), "cuInit");
  g_cuda.initialized = true;
  return g_cuda;
}

HipApi& hip() {
  if (g_hip.initialized) return g_hip;
  if (g_hip.lib == nullptr) {
    // The unversioned name is the -dev symlink; ROCm installs without it still have the SONAME.
    static const char* const names[] = {"libamdhip64.so", "libamdhip64.so.7", "libamdhip64.so.6",
                                        "libamdhip64.so.5"};
    void* lib = nullptr;
    std::string first_error;
    for (const char* name : names) {
      lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (lib != nullptr) break;
      const char* err = dlerror();
      if (first_error.empty() && err) first_error = err;
    }
    if (lib == nullptr)
      throw std::runtime_error("could not load libamdhip64.so, the HIP runtime library (is ROCm "
                               "installed?): " + first_error);
    const char* n = "libamdhip64.so";
    HipApi api;
    bind(lib, n, "hipInit", api.hipInit);
    bind(lib, n, "hipGetDevice", api.hipGetDevice);
    bind(lib, n, "hipModuleLoadData", api.hipModuleLoadData);
    bind(lib, n, "hipModuleGetFunction", api.hipModuleGetFunction);
    bind(lib, n, "hipFuncSetAttribute", api.hipFuncSetAttribute);
    bind(lib, n, "hipModuleLaunchKernel", api.hipModuleLaunchKernel);
    bind(lib, n, "hipGetErrorString", api.hipGetErrorString);
    bind(lib, n, "hipGetErrorName", api.hipGetErrorName);
    api.lib = lib;
    g_hip = api;
  }
  check_hip(g_hip.hipInit(0), "hipInit");
  g_hip.initialized = true;
  return g_hip;
}

// Make a CUDA context current on this thread if none is: the primary context of device 0.
// (PyTorch makes the primary context of its current device current, so normally one is.)
void cuda_ensure_context(CudaApi& api) {
  CUcontext ctx = nullptr;
  check_cuda(api.cuCtxGetCurrent(&ctx), "cuCtxGetCurrent");
  if (ctx != nullptr) return;
  CUdevice dev = 0;
  check_cuda(api.cuDeviceGet(&dev, 0), "cuDeviceGet");
  check_cuda(api.cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  check_cuda(api.cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
}

std::string device_arch_impl(Backend b) {
  if (b == Backend::Hip) return "";  // see device_arch's docstring
  CudaApi& api = cuda();
  cuda_ensure_context(api);
  CUdevice dev = 0;
  check_cuda(api.cuCtxGetDevice(&dev), "cuCtxGetDevice");
  int major = 0, minor = 0;
  check_cuda(api.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev),
             "cuDeviceGetAttribute");
  check_cuda(api.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev),
             "cuDeviceGetAttribute");
  return "sm_" + std::to_string(major) + std::to_string(minor);
}

// ---- argument packing ------------------------------------------------------------------------
constexpr size_t kMaxArgs = 64;

struct PackedArgs {
  alignas(16) unsigned char storage[kMaxArgs * 8];
  void* ptrs[kMaxArgs];
  size_t size = 0;  // bytes of storage used (no trailing padding)
};

// Replaces a pending TypeError / OverflowError from a conversion by one that names the argument
// (an OverflowError stays one); any other pending exception (say from __index__) propagates.
[[noreturn]] void arg_error(PyObject* exc, size_t i, char kind, PyObject* value, const char* want) {
  if (PyErr_Occurred()) {
    if (PyErr_ExceptionMatches(PyExc_OverflowError)) exc = PyExc_OverflowError;
    else if (!PyErr_ExceptionMatches(PyExc_TypeError)) throw py::error_already_set();
    PyErr_Clear();
  }
  PyErr_Format(exc, "kernel argument %zd (signature '%c') must be %s, got %R", (Py_ssize_t)i, kind,
               want, value);
  throw py::error_already_set();
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
// 'i' int32, 'l' int64, 'f' float32. Each value sits at its natural alignment, as C lays out a
// struct, and ptrs[k] points at argument k: what cuLaunchKernel's kernelParams wants.
void pack_args(const char* sig, size_t n, PyObject* args, PackedArgs& out) {
  if (n > kMaxArgs) throw py::value_error("a kernel takes at most 64 arguments here");
  if (!PyTuple_Check(args) && !PyList_Check(args))
    throw py::type_error("kernel arguments must be a tuple or a list");
  size_t count = (size_t)PySequence_Fast_GET_SIZE(args);
  if (count != n)
    throw py::type_error("the signature '" + std::string(sig, n) + "' names " + std::to_string(n) +
                         " arguments but " + std::to_string(count) + " were given");
  PyObject** items = PySequence_Fast_ITEMS(args);
  out.size = 0;
  for (size_t i = 0; i < n; ++i) {
    PyObject* v = items[i];
    switch (sig[i]) {
      case 'p': {
        uint64_t p = 0;
        if (v != Py_None) {
          if (!PyLong_Check(v)) arg_error(PyExc_TypeError, i, 'p', v, "an int address or None");
          p = (uint64_t)PyLong_AsUnsignedLongLong(v);
          if (p == (uint64_t)-1 && PyErr_Occurred())
            arg_error(PyExc_OverflowError, i, 'p', v, "a non-negative 64-bit address");
        }
        put<uint64_t>(out, i, p);
        break;
      }
      case 'i': {
        long long x = PyLong_AsLongLong(v);
        if (x == -1 && PyErr_Occurred()) arg_error(PyExc_TypeError, i, 'i', v, "an int32");
        if (x < INT32_MIN || x > INT32_MAX) arg_error(PyExc_OverflowError, i, 'i', v, "an int32");
        put<int32_t>(out, i, (int32_t)x);
        break;
      }
      case 'l': {
        long long x = PyLong_AsLongLong(v);
        if (x == -1 && PyErr_Occurred()) arg_error(PyExc_TypeError, i, 'l', v, "an int64");
        put<int64_t>(out, i, (int64_t)x);
        break;
      }
      case 'f': {
        double x = PyFloat_AsDouble(v);
        if (x == -1.0 && PyErr_Occurred()) arg_error(PyExc_TypeError, i, 'f', v, "a float");
        put<float>(out, i, (float)x);
        break;
      }
      default:
        throw py::value_error(std::string("unknown signature character '") + sig[i] +
                              "' (use p = pointer, i = int32, l = int64, f = float32)");
    }
  }
}

void read_dim3(py::handle seq, const char* what, unsigned int out[3]) {
  PyObject* o = seq.ptr();
  if ((!PyTuple_Check(o) && !PyList_Check(o)) || PySequence_Fast_GET_SIZE(o) != 3)
    throw py::type_error(std::string(what) + " must be a tuple of 3 ints");
  PyObject** items = PySequence_Fast_ITEMS(o);
  for (int k = 0; k < 3; ++k) {
    long long x = PyLong_AsLongLong(items[k]);
    if ((x == -1 && PyErr_Occurred()) || x < 1 || x > UINT32_MAX) {
      PyErr_Clear();
      throw py::value_error(std::string(what) + " must be 3 ints >= 1, got " +
                            py::repr(seq).cast<std::string>());
    }
    out[k] = (unsigned int)x;
  }
}

// ---- the module's functions ------------------------------------------------------------------
uintptr_t load_module(const std::string& backend, py::bytes image) {
  Backend b = parse_backend(backend);
  std::string data = image;  // a copy we own and keep for the module's life
  if (b == Backend::Cuda) {
    CudaApi& api = cuda();
    cuda_ensure_context(api);
    CUmodule mod = nullptr;
    CUresult r;
    {
      py::gil_scoped_release nogil;
      r = api.cuModuleLoadData(&mod, data.data());
    }
    check_cuda(r, "cuModuleLoadData");
    (*g_images)[(uintptr_t)mod] = std::move(data);
    return (uintptr_t)mod;
  }
  HipApi& api = hip();
  hipModule_t mod = nullptr;
  hipError_t r;
  {
    py::gil_scoped_release nogil;
    r = api.hipModuleLoadData(&mod, data.data());
  }
  check_hip(r, "hipModuleLoadData");
  (*g_images)[(uintptr_t)mod] = std::move(data);
  return (uintptr_t)mod;
}

uintptr_t get_function(const std::string& backend, uintptr_t module, const std::string& name) {
  if (parse_backend(backend) == Backend::Cuda) {
    CUfunction f = nullptr;
    check_cuda(cuda().cuModuleGetFunction(&f, (CUmodule)module, name.c_str()),
               ("cuModuleGetFunction('" + name + "')").c_str());
    return (uintptr_t)f;
  }
  hipFunction_t f = nullptr;
  check_hip(hip().hipModuleGetFunction(&f, (hipModule_t)module, name.c_str()),
            ("hipModuleGetFunction('" + name + "')").c_str());
  return (uintptr_t)f;
}

void set_max_dynamic_shared(const std::string& backend, uintptr_t func, int nbytes) {
  if (parse_backend(backend) == Backend::Cuda) {
    check_cuda(cuda().cuFuncSetAttribute((CUfunction)func,
                                         CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, nbytes),
               "cuFuncSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)");
    return;
  }
  hipError_t r = hip().hipFuncSetAttribute((const void*)func,
                                           hipFuncAttributeMaxDynamicSharedMemorySize, nbytes);
  // AMD GPUs need no opt-in (a kernel may use all of the LDS), and HIP's hipFuncSetAttribute only
  // knows kernels registered by the host program, so it rejects a module's function: ignore that.
  if (r != hipErrorInvalidDeviceFunction)
    check_hip(r, "hipFuncSetAttribute(hipFuncAttributeMaxDynamicSharedMemorySize)");
}

void launch(const std::string& backend, uintptr_t func, py::handle grid, py::handle block,
            unsigned int shared_bytes, uintptr_t stream, const std::string& signature,
            py::handle args) {
  Backend b = parse_backend(backend);
  unsigned int g[3], k[3];
  read_dim3(grid, "grid", g);
  read_dim3(block, "block", k);
  PackedArgs packed;
  pack_args(signature.data(), signature.size(), args.ptr(), packed);
  if (b == Backend::Cuda) {
    CudaApi& api = cuda();
    CUresult r;
    {
      py::gil_scoped_release nogil;
      r = api.cuLaunchKernel((CUfunction)func, g[0], g[1], g[2], k[0], k[1], k[2], shared_bytes,
                             (CUstream)stream, packed.ptrs, nullptr);
    }
    check_cuda(r, "cuLaunchKernel");
    return;
  }
  HipApi& api = hip();
  hipError_t r;
  {
    py::gil_scoped_release nogil;
    r = api.hipModuleLaunchKernel((hipFunction_t)func, g[0], g[1], g[2], k[0], k[1], k[2],
                                  shared_bytes, (hipStream_t)stream, packed.ptrs, nullptr);
  }
  check_hip(r, "hipModuleLaunchKernel");
}

int current_device(const std::string& backend) {
  if (parse_backend(backend) == Backend::Cuda) {
    CudaApi& api = cuda();
    cuda_ensure_context(api);
    CUdevice dev = 0;
    check_cuda(api.cuCtxGetDevice(&dev), "cuCtxGetDevice");
    return dev;
  }
  int dev = 0;
  check_hip(hip().hipGetDevice(&dev), "hipGetDevice");
  return dev;
}

py::bytes pack_args_for_test(const std::string& signature, py::handle args) {
  PackedArgs packed;
  pack_args(signature.data(), signature.size(), args.ptr(), packed);
  return py::bytes(reinterpret_cast<const char*>(packed.storage), packed.size);
}

}  // namespace

PYBIND11_MODULE(_kgen_launcher, m) {
  m.doc() = "kgen's kernel launcher: CUDA driver API / HIP module API, dlopen'ed at run time.";
  py::register_exception<WrongGpu>(m, "WrongGpuError", PyExc_RuntimeError);
  m.attr("MAX_ARGS") = kMaxArgs;
  m.def("load_module", &load_module, py::arg("backend"), py::arg("image"),
        "Load a code object (cubin / hsaco bytes) into the current context; returns the module "
        "handle as an int. The image is copied and kept alive for the life of the process.");
  m.def("get_function", &get_function, py::arg("backend"), py::arg("module"), py::arg("name"),
        "The kernel `name` of a loaded module, as an int handle.");
  m.def("set_max_dynamic_shared", &set_max_dynamic_shared, py::arg("backend"), py::arg("func"),
        py::arg("nbytes"),
        "Allow a kernel to use `nbytes` of dynamic shared memory (needed above 48 KiB on CUDA).");
  m.def("launch", &launch, py::arg("backend"), py::arg("func"), py::arg("grid"), py::arg("block"),
        py::arg("shared_bytes"), py::arg("stream"), py::arg("signature"), py::arg("args"),
        "Launch `func` on `stream` (an int handle, 0 = default). signature: one char per "
        "argument: p = pointer (int address), i = int32, l = int64, f = float32.");
  m.def("current_device", &current_device, py::arg("backend"),
        "The ordinal of the current device (on CUDA, of the current context; if this thread has "
        "none, the primary context of device 0 is made current first).");
  m.def(
      "device_arch",
      [](const std::string& backend) { return device_arch_impl(parse_backend(backend)); },
      py::arg("backend"),
      "CUDA: 'sm_XY' from the compute capability attributes (75, 76) of the current device. "
      "HIP: always '' -- the name (gfx942...) is only in hipDeviceProp_t, whose layout changes "
      "between ROCm versions, and the attribute that once gave a number (hipDeviceAttributeGcnArch) "
      "is gone since ROCm 6; ask PyTorch instead: "
      "torch.cuda.get_device_properties(i).gcnArchName.");
  m.def("pack_args_for_test", &pack_args_for_test, py::arg("signature"), py::arg("args"),
        "The packed argument storage that launch would pass, as bytes (for tests).");
}
