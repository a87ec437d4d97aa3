"""The scripts, styles and fonts that GX's Data Docs load from public CDNs, as pinned npm packages.

They are fetched once from the npm registry (`npm pack`, each tarball checked against its pinned integrity)
into the environment's share folder, by `fetch_docs_assets` (for setup) or else by the first Data Docs
build; each build copies them to `<site>/static/vendor` and the pages point there (quality/docs_views.py),
so the docs open with no network.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Package:
    """One npm package at a pinned version: its tarball's integrity and the files the docs need from it."""

    name: str
    version: str
    integrity: str      # the registry's `dist.integrity` (sha512), checked before anything is unpacked
    files: tuple[str, ...]  # paths inside the package; one ending in "/" is a whole folder

    @property
    def folder(self) -> str:
        return f"{self.name.replace('/', '__')}@{self.version}"


PACKAGES = (
    Package("bootstrap", "4.3.1", "sha512-rXqOmH1VilAt2DyPzluTi2blhk17bO7ef+zLLPlWvG494pDxcM234pJ8wTc/6R40UWizAIIMgxjvxZg5kmsbag==",
            ("dist/css/bootstrap.min.css", "dist/js/bootstrap.min.js")),
    Package("bootstrap-table", "1.19.1", "sha512-WvV+l1AI/C+zThaKmfHmi/IuayVNB0qdFyEhFx1jyZhO0oLtNJNANkCR3rvJf6Dkh72dsLElxpE/bzK9seEQLA==",
            ("dist/bootstrap-table.min.css", "dist/bootstrap-table.min.js", "dist/extensions/filter-control/")),
    Package("bootstrap-datepicker", "1.9.0", "sha512-9rYYbaVOheGYxjOr/+bJCmRPihfy+LkLSg4fIFMT9Od8WwWB/MB50w0JO1eBgKUMbb7PFHQD5uAfI3ArAxZRXA==",
            ("dist/css/bootstrap-datepicker.min.css", "dist/js/bootstrap-datepicker.min.js")),
    Package("@forevolve/bootstrap-dark", "1.1.0", "sha512-A3ucpEpxPoTVO490lZZCfjPXxv832l7mm1IxX3bXyxvgwnPGXDLyh7dWrphXKO8YBAu3EswbBEu3VSW8NRMW3A==",
            ("dist/css/bootstrap-prefers-dark.css",)),
    Package("@fortawesome/fontawesome-free", "6.6.0", "sha512-60G28ke/sXdtS9KZCpZSHHkCbdsOGEhIUGlwq6yhY74UpTiToIh8np7A8yphhM4BWsvNFtIvLpi4co+h9Mr9Ow==",
            ("css/all.min.css", "webfonts/")),
    Package("jquery", "3.7.1", "sha512-m4avr8yL8kmFN8psrbFFFmB/If14iN5o9nw/NgnnM+kybDJpRsAynV2BsfpTYrTRysYUdADVD7CkUUizgkpLfg==",
            ("dist/jquery.min.js",)),
    Package("popper.js", "1.12.9", "sha512-s0EEi9xiSCdqz9lV4IiVH5yIZnDX/U1t0tCjB+0jXx9jW8lrR7kOpVupiUg175ogqVoudpDXHF1p6dKATCHMeg==",
            ("dist/umd/popper.min.js",)),
    Package("vega", "5.33.1", "sha512-1fArfVDUqVbb5z8n+/nVQb+VNBzx8svY6CrsyTK4Ujm4yrd9I1auoKxBAPXLCavY1LcrbHUskQbGUP8gXOzyQw==",
            ("build/vega.min.js",)),
    Package("vega-lite", "5.23.0", "sha512-l4J6+AWE3DIjvovEoHl2LdtCUkfm4zs8Xxx7INwZEAv+XVb6kR6vIN1gt3t2gN2gs/y4DYTs/RPoTeYAuEg6mA==",
            ("build/vega-lite.min.js",)),
    Package("vega-embed", "6.29.0", "sha512-PmlshTLtLFLgWtF/b23T1OwX53AugJ9RZ3qPE2c01VFAbgt3/GSNI/etzA/GzdrkceXFma+FDHNXUppKuM0U6Q==",
            ("build/vega-embed.min.js",)),
)
_BY_NAME = {p.name: p for p in PACKAGES}

# Every CDN address in GX 1.24's Data Docs templates -> (package, file). GX names bootstrap-table's
# filter-control styles at 1.19.0 beside its 1.19.1 scripts; 1.19.1's copy serves both. vega@5,
# vega-lite@5 and vega-embed@6 are floating majors on the CDN: the newest of each major is pinned.
CDN = {
    "https://maxcdn.bootstrapcdn.com/bootstrap/4.3.1/css/bootstrap.min.css": ("bootstrap", "dist/css/bootstrap.min.css"),
    "https://stackpath.bootstrapcdn.com/bootstrap/4.3.1/js/bootstrap.min.js": ("bootstrap", "dist/js/bootstrap.min.js"),
    "https://unpkg.com/bootstrap-table@1.19.1/dist/bootstrap-table.min.css": ("bootstrap-table", "dist/bootstrap-table.min.css"),
    "https://unpkg.com/bootstrap-table@1.19.1/dist/bootstrap-table.min.js": ("bootstrap-table", "dist/bootstrap-table.min.js"),
    "https://unpkg.com/bootstrap-table@1.19.0/dist/extensions/filter-control/bootstrap-table-filter-control.css":
        ("bootstrap-table", "dist/extensions/filter-control/bootstrap-table-filter-control.css"),
    "https://unpkg.com/bootstrap-table@1.19.0/dist/extensions/filter-control/bootstrap-table-filter-control.min.css":
        ("bootstrap-table", "dist/extensions/filter-control/bootstrap-table-filter-control.min.css"),
    "https://unpkg.com/bootstrap-table@1.19.1/dist/extensions/filter-control/bootstrap-table-filter-control.min.js":
        ("bootstrap-table", "dist/extensions/filter-control/bootstrap-table-filter-control.min.js"),
    "https://cdnjs.cloudflare.com/ajax/libs/bootstrap-datepicker/1.9.0/css/bootstrap-datepicker.min.css":
        ("bootstrap-datepicker", "dist/css/bootstrap-datepicker.min.css"),
    "https://cdnjs.cloudflare.com/ajax/libs/bootstrap-datepicker/1.9.0/js/bootstrap-datepicker.min.js":
        ("bootstrap-datepicker", "dist/js/bootstrap-datepicker.min.js"),
    "https://cdn.jsdelivr.net/npm/@forevolve/bootstrap-dark@1.1.0/dist/css/bootstrap-prefers-dark.css":
        ("@forevolve/bootstrap-dark", "dist/css/bootstrap-prefers-dark.css"),
    "https://cdnjs.cloudflare.com/ajax/libs/font-awesome/6.6.0/css/all.min.css": ("@fortawesome/fontawesome-free", "css/all.min.css"),
    "https://code.jquery.com/jquery-3.7.1.min.js": ("jquery", "dist/jquery.min.js"),
    "https://cdnjs.cloudflare.com/ajax/libs/popper.js/1.12.9/umd/popper.min.js": ("popper.js", "dist/umd/popper.min.js"),
    "https://cdn.jsdelivr.net/npm/vega@5": ("vega", "build/vega.min.js"),
    "https://cdn.jsdelivr.net/npm/vega-lite@5": ("vega-lite", "build/vega-lite.min.js"),
    "https://cdn.jsdelivr.net/npm/vega-embed@6": ("vega-embed", "build/vega-embed.min.js"),
}

VENDOR = "static/vendor"    # under the Data Docs site's root


class AssetsMissing(RuntimeError):
    """The Data Docs assets are not fetched and could not be fetched now."""


def local_path(url: str) -> str:
    """Where a CDN address's file sits, relative to the site's root."""
    name, file = CDN[url]
    return f"{VENDOR}/{_BY_NAME[name].folder}/{file}"


def assets_home() -> Path:
    """The environment's copy of the pinned assets, shared by every state folder; its name changes with the pins."""
    pins = "\n".join(f"{p.name}@{p.version} {p.integrity} {p.files}" for p in PACKAGES)
    return Path(sys.prefix) / "share" / "lakehouse" / f"data-docs-assets-{hashlib.sha256(pins.encode()).hexdigest()[:12]}"


def ready(home: Path | None = None) -> bool:
    """Whether the pinned packages' files are in `home`."""
    return (home or assets_home()).is_dir()


def fetch_docs_assets(home: Path | None = None) -> Path:
    """Fetch every pinned package with `npm pack`, check its integrity, unpack the files the docs need; idempotent."""
    home = home or assets_home()
    if ready(home):
        return home
    if shutil.which("npm") is None:
        raise AssetsMissing("npm is needed once to fetch the Data Docs' scripts and styles from the npm registry "
                            "(Debian: apt-get install npm).")
    home.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=home.parent, prefix=".fetching-") as scratch:
        staged = Path(scratch) / "assets"
        for package in PACKAGES:
            _unpack(_pack(package, Path(scratch)), package, staged / package.folder)
        try:
            staged.rename(home)     # atomic: a test worker or a stream fetching at the same time sees all or nothing
        except OSError:
            if not ready(home):
                raise
    return home


def _pack(package: Package, scratch: Path) -> Path:
    spec = f"{package.name}@{package.version}"
    done = subprocess.run(["npm", "pack", "--silent", "--pack-destination", str(scratch), spec],
                          capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise AssetsMissing(f"npm could not fetch {spec} for the Data Docs: {done.stderr.strip()[-300:]}")
    tarball = scratch / done.stdout.strip().splitlines()[-1]
    algorithm, expected = package.integrity.split("-", 1)
    digest = base64.b64encode(hashlib.new(algorithm, tarball.read_bytes()).digest()).decode()
    if digest != expected:
        raise AssetsMissing(f"{spec} from the npm registry does not match its pinned integrity; not used.")
    return tarball


def _unpack(tarball: Path, package: Package, target: Path) -> None:
    with tarfile.open(tarball) as archive:
        for member in archive.getmembers():
            inner = member.name.split("/", 1)[-1]   # npm tarballs hold one top folder, usually "package/"
            if member.isfile() and any(inner == f or (f.endswith("/") and inner.startswith(f)) for f in package.files):
                out = target / inner
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(archive.extractfile(member).read())


def install_into(site: Path, home: Path | None = None) -> None:
    """Copy each pinned package's files into the site's static/vendor folder, unless it is there already."""
    for package in (home or assets_home()).iterdir():
        if not (site / VENDOR / package.name).exists():   # a package's folder is named by its version
            shutil.copytree(package, site / VENDOR / package.name, dirs_exist_ok=True)   # another writer may race
