"""The app's themes: a Textual theme plus the run palette that colours speculative runs.

`specchat-safe` (the default) uses the Okabe–Ito colours, readable with every common colour-vision
deficiency. Any other Textual theme works too; it gets the safe palette (dark) or the light one.
"""

from __future__ import annotations

from dataclasses import dataclass

from textual.theme import Theme

from specchat.themes.palette import COLOUR_BLIND_SAFE, DARK, LIGHT, RunPalette


@dataclass(frozen=True)
class AppTheme:
    theme: Theme
    palette: RunPalette


APP_THEMES: dict[str, AppTheme] = {
    "specchat-safe": AppTheme(
        Theme(
            name="specchat-safe",
            primary="#56B4E9",
            secondary="#009E73",
            accent="#E69F00",
            warning="#F0E442",
            error="#D55E00",
            success="#009E73",
            foreground="#e6e6e6",
            background="#16181c",
            surface="#1e2127",
            panel="#262a31",
            dark=True,
        ),
        COLOUR_BLIND_SAFE,
    ),
    "specchat-dark": AppTheme(
        Theme(
            name="specchat-dark",
            primary="#7aa2f7",
            secondary="#bb9af7",
            accent="#e0af68",
            warning="#e0af68",
            error="#f7768e",
            success="#9ece6a",
            foreground="#c0caf5",
            background="#1a1b26",
            surface="#24283b",
            panel="#2f334d",
            dark=True,
        ),
        DARK,
    ),
    "specchat-light": AppTheme(
        Theme(
            name="specchat-light",
            primary="#005f87",
            secondary="#5f00af",
            accent="#875f00",
            warning="#875f00",
            error="#af0000",
            success="#005f00",
            foreground="#1c1c1c",
            background="#fafafa",
            surface="#eeeeee",
            panel="#e0e0e0",
            dark=False,
        ),
        LIGHT,
    ),
}


def palette_for(theme: Theme | None) -> RunPalette:
    """The run palette for any Textual theme: our own, else by how dark the theme is."""
    if theme is not None and theme.name in APP_THEMES:
        return APP_THEMES[theme.name].palette
    if theme is not None and not theme.dark:
        return LIGHT
    return COLOUR_BLIND_SAFE
