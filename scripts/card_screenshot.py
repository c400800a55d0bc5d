"""A report card page as a browser shows it: headless Chromium lays out `card.html` in a window
of the given width and saves the top of the page as a PNG, and prints the page's laid-out width
(docs/report_card.md, "Reading the card").

    python scripts/card_screenshot.py --page=report_card/card.html --output=card.png
"""
import dataclasses
import os
import re
import shutil
import subprocess
import tempfile

from models.foundation.cli import option, run_binary
from models.foundation.errors import MissingPathError, UserError

CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update",
                  "--disable-sync")


@dataclasses.dataclass(frozen=True)
class Config:
    page: str = option("report_card/card.html", "The card page to show.")
    output: str = option("card.png", "The screenshot (PNG).")
    width: int = option(1280, "Window width in pixels.")
    height: int = option(900, "Window height in pixels (the part of the page shot).")


def chromium() -> str:
    """The headless browser's path; one line if there is none."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        raise UserError("no Chromium on PATH (Debian: apt-get install chromium)")
    return found


def laid_out_width(page: str, width: int) -> int:
    """The page's scroll width in a window `width` pixels wide (<= width: no side scroll)."""
    with tempfile.TemporaryDirectory() as folder:
        probe = os.path.join(folder, "probe.html")
        with open(page, encoding="utf-8") as handle:
            text = handle.read()
        with open(probe, "w", encoding="utf-8") as handle:
            handle.write(text.replace("</body>", "<script>document.title = 'width=' + "
                                      "document.documentElement.scrollWidth</script></body>"))
        done = subprocess.run([chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={folder}/profile",
                               f"--window-size={width},900", "--dump-dom", f"file://{probe}"],
                              capture_output=True, text=True, timeout=120, check=False)
    found = re.search(r"<title>width=(\d+)</title>", done.stdout)
    if found is None:
        raise UserError(f"Chromium did not lay out {page}: {done.stderr.strip()[-300:]}")
    return int(found.group(1))


def run(config: Config) -> int:
    """Saves the screenshot and returns the page's laid-out width."""
    if not os.path.isfile(config.page):
        raise MissingPathError(f"--page={config.page} does not exist")
    width = laid_out_width(config.page, config.width)
    with tempfile.TemporaryDirectory() as folder:
        subprocess.run([chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={folder}/profile",
                        f"--window-size={config.width},{config.height}",
                        f"--screenshot={os.path.abspath(config.output)}",
                        f"file://{os.path.abspath(config.page)}"],
                       capture_output=True, timeout=120, check=True)
    print(f"{config.page}: laid out {width} px wide in a {config.width} px window; "
          f"wrote {config.output}")
    return width


if __name__ == "__main__":
    run_binary(Config, run)
