"""Operations: metrics, drain, the live quality monitor, shared connections, log context and guard wiring."""
