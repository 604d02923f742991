//! Benchmarks of the bus (see `bus-bench --help`); filled in by the benchmark work.
