"""The status colours are legible (WCAG 2.2, relative luminance): status text >= 4.5:1 and status
marks (dots, stripes, bars, outlines) >= 3:1 on every background they are drawn on, light and dark.

Read from the CSS the pages ship: the colour tokens of static/dashboard/dashboard.css (`:root` and
its `prefers-color-scheme: dark` block), the `[data-status]` rules that pick a token per status,
and the admin's badge colours (static/dashboard/admin.css) on Django admin's own backgrounds.
axe-core checks the rendered pages as well (tests/browser/test_axe.py); this test names the token
that regressed, for every status, without a browser.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from workcenter.models import ActionStatus, RunStatus, WorkItemStatus

STATIC = Path(__file__).resolve().parents[2] / "static" / "dashboard"
TEXT, MARK = 4.5, 3.0
# what a status colour sits on: its own tint (badges, nodes, banners), the cards, the hovered or
# selected rows and tags, and the page
BACKGROUNDS = ("surface", "surface-2", "bg")
# Django admin 5.2 (admin/css/base.css, dark_mode.css): --body-bg, --darkened-bg, --selected-row
ADMIN_BACKGROUNDS = {"light": ("#ffffff", "#f8f8f8", "#ffffcc"), "dark": ("#121212", "#212121", "#00363a")}


def luminance(colour: str) -> float:
    h = colour.lstrip("#")
    if len(h) == 3:
        h = "".join(c * 2 for c in h)
    channels = [int(h[i:i + 2], 16) / 255 for i in (0, 2, 4)]
    r, g, b = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(a: str, b: str) -> float:
    hi, lo = sorted((luminance(a), luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def block(css: str, start: int) -> str:
    """The text between the brace that follows `start` and its matching closing brace."""
    i = css.index("{", start)
    depth = 0
    for j in range(i, len(css)):
        depth += {"{": 1, "}": -1}.get(css[j], 0)
        if depth == 0:
            return css[i + 1:j]
    raise ValueError("unbalanced braces")


def hex_tokens(text: str, prefix: str = "") -> dict[str, str]:
    return dict(re.findall(rf"--({prefix}[\w-]+):\s*(#[0-9a-fA-F]{{3,6}})\b", text))


def strip_comments(css: str) -> str:
    return re.sub(r"/\*.*?\*/", "", css, flags=re.S)


def themes(css: str, prefix: str = "") -> dict[str, dict[str, str]]:
    """{'light': tokens, 'dark': tokens}: every top-level `:root` block, then every dark media
    query's blocks over them."""
    css = strip_comments(css)
    dark_blocks = [block(css, m.start()) for m in re.finditer(r"@media \(prefers-color-scheme: dark\)", css)]
    top = css
    for b in dark_blocks:
        top = top.replace(b, "")
    light: dict[str, str] = {}
    for m in re.finditer(r":root\s*\{", top):
        light.update(hex_tokens(block(top, m.start()), prefix))
    dark = dict(light)
    for b in dark_blocks:
        dark.update(hex_tokens(b, prefix))
    return {"light": light, "dark": dark}


# the pages' stylesheets, in the order the item page loads them: status tokens may live in any
DASHBOARD = "\n".join((STATIC / name).read_text(encoding="utf-8")
                      for name in ("dashboard.css", "graph.css", "time.css", "needs.css"))
ADMIN = (STATIC / "admin.css").read_text(encoding="utf-8")


def status_tokens() -> dict[str, tuple[str, str]]:
    """status -> (its colour token, its tint token), from the `[data-status=...]` rules."""
    found = {}
    for selectors, body in re.findall(r"((?:\[data-status=\"[\w-]+\"\][,\s]*)+)\{([^}]*)\}", strip_comments(DASHBOARD)):
        fg = re.search(r"--st:\s*var\(--([\w-]+)\)", body)
        bg = re.search(r"--st-bg:\s*var\(--([\w-]+)\)", body)
        if fg and bg:
            for status in re.findall(r"\[data-status=\"([\w-]+)\"\]", selectors):
                found[status] = (fg.group(1), bg.group(1))
    return found


STATUSES = status_tokens()
ALL_STATUSES = sorted(set(WorkItemStatus.values) | set(ActionStatus.values) | set(RunStatus.values))


def test_every_status_of_the_store_has_a_colour():
    assert set(ALL_STATUSES) <= set(STATUSES), sorted(set(ALL_STATUSES) - set(STATUSES))


@pytest.mark.parametrize("theme", ["light", "dark"])
@pytest.mark.parametrize("status", sorted(STATUSES))
def test_status_text_and_marks_are_legible(theme, status):
    tokens = themes(DASHBOARD)[theme]
    fg_name, tint_name = STATUSES[status]
    fg = tokens[fg_name]
    on = {tint_name: tokens[tint_name], **{name: tokens[name] for name in BACKGROUNDS}}
    ratios = {name: round(contrast(fg, colour), 2) for name, colour in on.items()}
    print(theme, status, fg_name, fg, ratios)
    # text: the badge's label, the node's status line, the banner's stage name (12-13 px)
    assert all(r >= TEXT for r in ratios.values()), (theme, status, fg_name, fg, ratios)
    # marks (dot, stripe, bar, outline) are drawn in the same colour, so they clear 3:1 as well
    assert min(ratios.values()) >= MARK


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_text_on_status_fills_is_legible(theme):
    """Labels drawn on a status colour (the danger button, the "not renewing" mark, the round
    icons) use the surface colour: light on the light theme's fill, dark on the dark theme's."""
    tokens = themes(DASHBOARD)[theme]
    for name in ("st-failed", "st-waiting", "st-running", "st-done"):
        assert contrast(tokens["surface"], tokens[name]) >= TEXT, (theme, name)
    for rule in (r"\.btn-danger \{[^}]*\}", r"\.stale-mark \{[^}]*\}"):
        body = re.search(rule, strip_comments(DASHBOARD)).group(0)
        assert "color: var(--surface)" in body, body


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_general_text_tokens_are_legible(theme):
    tokens = themes(DASHBOARD)[theme]
    for fg in ("fg", "fg-2", "muted", "accent"):
        for bg in ("surface", "surface-2", "bg"):
            assert contrast(tokens[fg], tokens[bg]) >= TEXT, (theme, fg, bg)


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_text_on_status_tints_is_legible(theme):
    """A node is filled with its status's tint and holds the stage name (--fg), its type and
    attempt line (--muted) and its time (--fg-2): each legible on every tint."""
    tokens = themes(DASHBOARD)[theme]
    for status, (_, tint) in STATUSES.items():
        for fg in ("fg", "fg-2", "muted"):
            assert contrast(tokens[fg], tokens[tint]) >= TEXT, (theme, status, fg, tint)


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_admin_badges_are_legible(theme):
    tokens = themes(ADMIN, prefix="wc-")[theme]
    badges = {status: token
              for selectors, token in re.findall(r"((?:\.wc-badge\.wc-\w+[,\s]*)+)\{\s*color:\s*var\(--([\w-]+)\)",
                                                 strip_comments(ADMIN))
              for status in re.findall(r"\.wc-(\w+)", selectors) if status != "badge"}
    assert {"ready", "running", "waiting", "failed", "completed", "superseded"} <= set(badges)
    for status, token in badges.items():
        for bg in ADMIN_BACKGROUNDS[theme]:
            assert contrast(tokens[token], bg) >= TEXT, (theme, status, token, tokens[token], bg)
    # the explicit dark theme (the admin's toggle) says the same as the automatic one
    explicit = hex_tokens(block(strip_comments(ADMIN), strip_comments(ADMIN).index('html[data-theme="dark"]')), "wc-")
    assert explicit == {k: v for k, v in themes(ADMIN, prefix="wc-")["dark"].items() if k in explicit}


def mix(a: str, b: str, share: float) -> str:
    """`color-mix(in srgb, a share, b)`."""
    ca, cb = (bytes.fromhex(c.lstrip("#")) for c in (a, b))
    return "#" + "".join(f"{round(x * share + y * (1 - share)):02x}" for x, y in zip(ca, cb))


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_progress_bar_stages_to_run_are_visible(theme):
    """The list's progress bar draws the stages still to run in a quieter ready colour; it is a
    mark, so >= 3:1 against the card and the bar's track."""
    rule = re.search(r'\.progress-seg\[data-status="ready"\] \{ background: color-mix\(in srgb, var\(--st-ready\) '
                     r'(\d+)%, var\(--surface\)\); \}', strip_comments(DASHBOARD))
    assert rule, "the ready segment's colour rule changed: say its contrast here"
    tokens = themes(DASHBOARD)[theme]
    colour = mix(tokens["st-ready"], tokens["surface"], int(rule.group(1)) / 100)
    for bg in ("surface", "surface-2"):
        assert contrast(colour, tokens[bg]) >= MARK, (theme, colour, bg, round(contrast(colour, tokens[bg]), 2))
