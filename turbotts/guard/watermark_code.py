"""The bits a watermark carries, and the channel code that protects them.

A :class:`Payload` (key id, minute timestamp, request-hash prefix: 56 bits) gets
a CRC-16 so a detector can tell a real mark from noise, then a rate-1/2,
constraint-length-7 convolutional code (the NASA/Voyager generators 171/133)
decoded with soft-decision Viterbi: about 5 dB of coding gain over sending the
raw bits, which is what lets a mark at ~30 dB below the speech survive a lossy
codec. Pure numpy, no audio here; ``watermark.py`` turns these bits into sound.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timezone

import numpy as np

KEY_ID_BITS = 8
TIMESTAMP_BITS = 32  # minutes since the Unix epoch: good until the year 10136
REQUEST_HASH_BITS = 16
CRC_BITS = 16
PAYLOAD_BITS = KEY_ID_BITS + TIMESTAMP_BITS + REQUEST_HASH_BITS  # 56
CONSTRAINT_LENGTH = 7
NUM_TAIL_BITS = CONSTRAINT_LENGTH - 1
NUM_CODED_BITS = 2 * (PAYLOAD_BITS + CRC_BITS + NUM_TAIL_BITS)  # 156
_GENERATORS = (0o171, 0o133)
_NUM_STATES = 1 << NUM_TAIL_BITS


@dataclass(frozen=True)
class Payload:
    """What a mark says: which key made it, when, and for which request.

    ``request_hash`` is a 16-bit prefix of the request's SHA-256, enough to find
    the request in the logs (which record ``text_sha256``), not to recover it.
    """

    key_id: int
    timestamp_min: int
    request_hash: int

    def __post_init__(self) -> None:
        for name, value, bits in (
            ("key_id", self.key_id, KEY_ID_BITS),
            ("timestamp_min", self.timestamp_min, TIMESTAMP_BITS),
            ("request_hash", self.request_hash, REQUEST_HASH_BITS),
        ):
            if not 0 <= value < (1 << bits):
                raise ValueError(f"watermark {name} must fit in {bits} bits (0..{(1 << bits) - 1}), not {value}")

    @classmethod
    def for_request(cls, key_id: int, request_key: str | bytes, when: datetime | None = None) -> Payload:
        """The payload for one request, stamped with ``when`` (default: now, UTC)."""
        raw = request_key.encode() if isinstance(request_key, str) else request_key
        prefix = int.from_bytes(hashlib.sha256(raw).digest()[:2], "big")
        moment = when if when is not None else datetime.now(timezone.utc)
        return cls(key_id=key_id, timestamp_min=int(moment.timestamp() // 60), request_hash=prefix)

    @property
    def timestamp(self) -> datetime:
        return datetime.fromtimestamp(self.timestamp_min * 60, tz=timezone.utc)

    def to_int(self) -> int:
        value = (self.key_id << TIMESTAMP_BITS) | self.timestamp_min
        return (value << REQUEST_HASH_BITS) | self.request_hash

    @classmethod
    def from_int(cls, value: int) -> Payload:
        request_hash = value & ((1 << REQUEST_HASH_BITS) - 1)
        value >>= REQUEST_HASH_BITS
        timestamp_min = value & ((1 << TIMESTAMP_BITS) - 1)
        return cls(key_id=value >> TIMESTAMP_BITS, timestamp_min=timestamp_min, request_hash=request_hash)


def crc16(bits: np.ndarray) -> int:
    """CRC-16/CCITT (poly 0x1021, init 0xFFFF) over a bit array, MSB first."""
    crc = 0xFFFF
    for bit in bits.tolist():
        feedback = ((crc >> 15) & 1) ^ int(bit)
        crc = (crc << 1) & 0xFFFF
        if feedback:
            crc ^= 0x1021
    return crc


def _int_to_bits(value: int, num_bits: int) -> np.ndarray:
    return np.array([(value >> (num_bits - 1 - i)) & 1 for i in range(num_bits)], dtype=np.uint8)


def _bits_to_int(bits: np.ndarray) -> int:
    value = 0
    for bit in bits.tolist():
        value = (value << 1) | int(bit)
    return value


def _parity(values: np.ndarray) -> np.ndarray:
    out = np.zeros_like(values)
    for shift in range(CONSTRAINT_LENGTH):
        out ^= (values >> shift) & 1
    return out


def _convolve(bits: np.ndarray) -> np.ndarray:
    """Rate-1/2 convolutional encoding; ``bits`` already ends with the zero tail."""
    state = 0
    out = np.empty(2 * len(bits), dtype=np.uint8)
    for i, bit in enumerate(bits.tolist()):
        register = (state << 1) | int(bit)
        for j, generator in enumerate(_GENERATORS):
            out[2 * i + j] = bin(register & generator).count("1") & 1
        state = register & (_NUM_STATES - 1)
    return out


def encode(payload: Payload) -> np.ndarray:
    """Payload -> the 156 coded bits (0/1) that the mark carries."""
    data = _int_to_bits(payload.to_int(), PAYLOAD_BITS)
    framed = np.concatenate([data, _int_to_bits(crc16(data), CRC_BITS), np.zeros(NUM_TAIL_BITS, dtype=np.uint8)])
    return _convolve(framed)


# Trellis tables: next state ns = ((s << 1) | b) & 63, so ns's input bit is ns & 1 and
# its two predecessors differ only in the bit that falls off (bit 5).
_NEXT = np.arange(_NUM_STATES)
_PRED = np.stack([_NEXT >> 1, (_NEXT >> 1) | (1 << (NUM_TAIL_BITS - 1))], axis=1)  # (64, 2)
_REGISTER = (_PRED << 1) | (_NEXT & 1)[:, None]  # (64, 2) the 7-bit register on each branch
_BRANCH_SIGNS = np.stack([1.0 - 2.0 * _parity(_REGISTER & g) for g in _GENERATORS], axis=-1)  # (64, 2, 2)


def decode(soft: np.ndarray) -> Payload | None:
    """Soft-decision Viterbi over 156 soft symbols (positive means bit 0).

    Returns:
        The payload, or None when the decoded CRC does not match (no mark, or
        too damaged to trust).
    """
    symbols = np.asarray(soft, dtype=np.float64).reshape(-1, 2)  # (78, 2)
    metric = np.full(_NUM_STATES, -np.inf)
    metric[0] = 0.0
    choices = np.empty((len(symbols), _NUM_STATES), dtype=np.uint8)
    for t, pair in enumerate(symbols):
        candidates = metric[_PRED] + _BRANCH_SIGNS @ pair  # (64, 2)
        choices[t] = np.argmax(candidates, axis=1)
        metric = candidates[_NEXT, choices[t]]
    state = 0  # the zero tail terminates the trellis in state 0
    bits = np.empty(len(symbols), dtype=np.uint8)
    for t in range(len(symbols) - 1, -1, -1):
        bits[t] = state & 1
        state = int(_PRED[state, choices[t, state]])
    data, crc_bits = bits[:PAYLOAD_BITS], bits[PAYLOAD_BITS : PAYLOAD_BITS + CRC_BITS]
    if crc16(data) != _bits_to_int(crc_bits):
        return None
    return Payload.from_int(_bits_to_int(data))
