"""Running gfx942 kernels on the host CPU: the generated HIP source, byte for byte, compiled as
host C++ against an emulation of the builtins it uses (templates/emu/), each workgroup's threads
run as 64-lane waves of fibers (kgen.emulate.runner)."""
