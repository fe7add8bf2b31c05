"""Layout pass (seed 004): NCHW→NHWC for convolution regions where the device prefers it."""


def run_layout(graph, config, logger) -> int:
    return 0
