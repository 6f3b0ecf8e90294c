"""Quality measurement: how far a precision mode or a code change moves the output.

* :mod:`turbotts.fidelity.mcd` mel-cepstral distortion between two waveforms;
* :mod:`turbotts.fidelity.agreement` code agreement and KL between code distributions;
* :mod:`turbotts.quality.probe` one precision mode measured in its own process;
* :mod:`turbotts.quality.sweep` ``turbotts quant-sweep``;
* :mod:`turbotts.quality.check` ``turbotts quality check`` against a stored baseline.

Nothing is imported here: the commands' modules load torch only when they run.
"""
