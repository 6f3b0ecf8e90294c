"""Figures for benchmark and sweep reports: one way to open and save them (headless Agg backend)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def new_figure(num_cols: int, size_in: tuple[float, float]) -> tuple[Any, Any]:
    """A figure with ``num_cols`` axes side by side, drawn off-screen."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(1, num_cols, figsize=size_in)


def save_figure(fig: Any, path: Path, title: str, dpi: int = 110) -> None:
    """Title, tight layout, write the PNG (creating its folder), and free the figure."""
    import matplotlib.pyplot as plt

    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
