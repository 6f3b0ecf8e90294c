"""Texts a load test sends: a built-in mix of Chinese and English of several lengths, or a user's file.

Why mixed lengths: time to first audio depends little on length, end-to-end latency
and stalls a lot; a corpus of one length hides how long answers behave under load.
"""

from __future__ import annotations

from pathlib import Path

BUILTIN_TEXTS = (
    # short (one segment, about a second of speech)
    "Hello there.",
    "你好，欢迎光临。",
    "Your order has shipped.",
    "明天见。",
    # medium (a sentence or two)
    "The quick brown fox jumps over the lazy dog, and then it takes a long nap in the sun.",
    "今天天气很好，我们一起去公园散步吧，顺便买一杯咖啡。",
    "Continuous batching lets new requests join the running batch at once, so nobody waits for a slow neighbour.",
    "语音合成服务需要在高并发下保持低延迟，同时保证声音自然流畅。",
    # long (several segments: exercises the segment pipeline and streaming joins)
    "Thank you for calling. Your call is important to us. Please stay on the line and the next available "
    "agent will be with you shortly. In the meantime, you can find answers to most questions on our website.",
    "欢迎使用语音合成。这是一段较长的测试文本，用来检查长句的流式输出是否连续。我们希望每一段音频都能按时到达，"
    "听众不会听到任何停顿或者卡顿。",
    "We mix English and Chinese here: 今天的会议改到下午三点。 Please bring the quarterly report, "
    "and remember that the deadline is next Friday.",
)


def load_texts(path: Path) -> tuple[str, ...]:
    """One text per non-blank line of a UTF-8 file.

    Raises:
        ValueError: the file cannot be read, or holds no text.
    """
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read --texts {path}: {exc}") from exc
    texts = tuple(line.strip() for line in lines if line.strip())
    if not texts:
        raise ValueError(f"--texts {path} holds no text: write one text per line")
    return texts
