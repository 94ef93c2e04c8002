"""Running gfx942 kernels on the host CPU: the generated HIP source, byte for byte, compiled as
host C++ against an emulation of the builtins it uses (templates/emu/), each workgroup's threads
run as 64-lane waves of fibers, every load and store checked for bounds and LDS races
(kgen.emulate.runner). kgen.check runs whole specs through it."""
