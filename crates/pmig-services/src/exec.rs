//! Remote execution with a home node: `pmig run`, `pmig ps`, `pmig kill` (issue 5).
