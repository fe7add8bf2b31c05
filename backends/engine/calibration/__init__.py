"""INT8 calibration: calibrators with TensorRT's protocol, the statistics they take, the cache file."""
from backends.engine.calibration.cache import read_cache, write_cache  # noqa: F401
from backends.engine.calibration.calibrator import (  # noqa: F401
    CalibrationAlgoType, Calibrator, IInt8Calibrator, IInt8EntropyCalibrator, IInt8EntropyCalibrator2,
    IInt8LegacyCalibrator, IInt8MinMaxCalibrator)
