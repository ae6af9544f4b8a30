#!/usr/bin/env python3
"""Draws the sample rich menu images richmenus/member.png and survey_tab.png.

usage:
  python3 scripts/draw_rich_menus.py [OUTPUT_DIR]

OUTPUT_DIR defaults to the repository's richmenus/ (wherever it is run from).

Needs Pillow (`pip install --user pillow`, or a venv; it is not a dependency
of the service) and the IPA Gothic font from Debian's `fonts-ipafont-gothic`
package (/usr/share/fonts/opentype/ipafont-gothic/ipagp.ttf, or ipag.ttf).

Each menu is 2500x843 with one coloured panel per tap area of its TOML file
(the bounds below must stay equal to the `[[areas]]` bounds there), the
area's label drawn large in its centre. A tab strip along the top shows which
menu is open: the open menu's tab is filled with its colour, the other
menu's tab (over the area that switches to it) is grey.

The output is deterministic: same Pillow and font, same bytes. Images are
saved as palette PNGs (well under LINE's 1 MB limit).
"""
import os
import sys

from PIL import Image, ImageDraw, ImageFont

FONT_DIR = "/usr/share/fonts/opentype/ipafont-gothic"
FONTS = ("ipagp.ttf", "ipag.ttf")

WIDTH, HEIGHT = 2500, 843
SCALE = 2  # drawn at twice the size, then scaled down for smooth edges
TAB_HEIGHT = 130
GAP = 12  # margin around each panel; two panels are 2 x GAP apart
RADIUS = 36

# A calm palette.
BACKGROUND = "#F6F4EF"
INK = "#2E3A3F"
MUTED_INK = "#6E7479"
INACTIVE_TAB = "#DEDDD8"
TEAL = "#3E7C78"  # the member menu's colour
INDIGO = "#55679A"  # the survey tab's colour

# Panel colours: soft tints.
SAGE = "#D7EAE2"
SAND = "#F2E7D3"
MIST = "#DFE5F1"

# One entry per menu: its open tab and its panels, left to right. `area` is
# (x, width) of the TOML area (all are full height); `lines` is the label
# as drawn (the TOML's `label`, broken where it reads best).
MENUS = {
    "member": {
        "tabs": [
            {"text": "会員メニュー", "x": 0, "width": 1666, "active": True, "color": TEAL},
            {"text": "アンケート", "x": 1666, "width": 834, "active": False},
        ],
        "panels": [
            {"area": (0, 833), "fill": SAGE, "lines": ["満足度", "アンケート"],
             "caption": "3つの質問にお答えください"},
            {"area": (833, 833), "fill": SAND, "lines": ["営業時間"],
             "caption": "営業時間をご案内します"},
            {"area": (1666, 834), "fill": MIST, "lines": ["アンケート", "タブ"],
             "caption": "タップで切り替え →"},
        ],
    },
    "survey_tab": {
        "tabs": [
            {"text": "会員メニュー", "x": 0, "width": 833, "active": False},
            {"text": "アンケート", "x": 833, "width": 1667, "active": True, "color": INDIGO},
        ],
        "panels": [
            {"area": (0, 833), "fill": SAGE, "lines": ["会員メニュー"],
             "caption": "← タップで戻る"},
            {"area": (833, 1667), "fill": MIST, "lines": ["来店フォローアップ"],
             "caption": "ご来店のお礼と、翌日にひとつだけ質問"},
        ],
    },
}


def font_path():
    for name in FONTS:
        path = os.path.join(FONT_DIR, name)
        if os.path.exists(path):
            return path
    sys.exit(f"IPA Gothic not found in {FONT_DIR}: install Debian's fonts-ipafont-gothic")


def fitted_font(path, lines, max_size, max_width):
    """The largest size up to max_size at which every line fits max_width."""
    size = max_size
    while size > 10:
        font = ImageFont.truetype(path, size)
        if all(font.getlength(line) <= max_width for line in lines):
            return font
        size -= 2
    return ImageFont.truetype(path, size)


def draw_menu(menu, path):
    s = SCALE
    image = Image.new("RGB", (WIDTH * s, HEIGHT * s), BACKGROUND)
    draw = ImageDraw.Draw(image)

    # The tab strip: the open menu's tab filled, the other grey.
    for tab in menu["tabs"]:
        box = (
            (tab["x"] + GAP) * s,
            GAP * s,
            (tab["x"] + tab["width"] - GAP) * s,
            (TAB_HEIGHT - GAP // 2) * s,
        )
        fill = tab["color"] if tab["active"] else INACTIVE_TAB
        draw.rounded_rectangle(box, radius=RADIUS * s, fill=fill)
        font = ImageFont.truetype(path, 64 * s)
        text = ("● " + tab["text"]) if tab["active"] else tab["text"]
        centre = ((box[0] + box[2]) / 2, (box[1] + box[3]) / 2)
        draw.text(centre, text, font=font, fill="#FFFFFF" if tab["active"] else MUTED_INK, anchor="mm")

    # The panels, one per area, the label centred on the area's centre.
    for panel in menu["panels"]:
        x, width = panel["area"]
        box = (
            (x + GAP) * s,
            (TAB_HEIGHT + GAP // 2) * s,
            (x + width - GAP) * s,
            (HEIGHT - GAP) * s,
        )
        draw.rounded_rectangle(box, radius=RADIUS * s, fill=panel["fill"])
        inner = (width - 2 * GAP) * 0.84
        font = fitted_font(path, panel["lines"], 170 * s, inner * s)
        caption = fitted_font(path, [panel["caption"]], 58 * s, inner * s)
        # The label and its caption as one block, centred in the panel.
        line_height = font.size * 1.15
        gap = 48 * s
        block = line_height * len(panel["lines"]) + gap + caption.size
        centre_x = (x + width / 2) * s
        top = (box[1] + box[3]) / 2 - block / 2
        for index, line in enumerate(panel["lines"]):
            middle = top + line_height * (index + 0.5)
            draw.text((centre_x, middle), line, font=font, fill=INK, anchor="mm")
        caption_middle = top + line_height * len(panel["lines"]) + gap + caption.size / 2
        draw.text((centre_x, caption_middle), panel["caption"], font=caption, fill=MUTED_INK, anchor="mm")

    image = image.resize((WIDTH, HEIGHT), Image.Resampling.LANCZOS)
    return image.quantize(colors=96, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)


def main():
    default = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "richmenus")
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.normpath(default)
    os.makedirs(out_dir, exist_ok=True)
    path = font_path()
    for name, menu in MENUS.items():
        target = os.path.join(out_dir, f"{name}.png")
        draw_menu(menu, path).save(target, format="PNG", optimize=True)
        print(f"{target}: {os.path.getsize(target)} bytes")


if __name__ == "__main__":
    main()
