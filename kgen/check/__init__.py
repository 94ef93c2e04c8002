"""Checking a spec's kernels against its reference: sample sizes and inputs from the spec
(samples), the reference run in float64 and in the inputs' dtype (reference), the comparison at
a tolerance set by PyTorch's own error (compare), and the whole check of a variant on an
emulated target (emulated), which `kgen check` and the tests use."""
