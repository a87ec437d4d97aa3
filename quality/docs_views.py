"""GX page views whose pages load every script, style, font and image from the site's own static folder.

The Data Docs site config names these classes (quality/report.py); GX instantiates them in place of its
default views.
"""

from __future__ import annotations

import re

from great_expectations.render.view import DefaultJinjaIndexPageView, DefaultJinjaPageView
from jinja2 import BaseLoader

from lakehouse.quality.docs_assets import CDN, local_path

# GX's images are fetched from its web-assets bucket although the package ships them in static/images.
GX_IMAGES = "https://great-expectations-web-assets.s3.us-east-2.amazonaws.com/"
# A CDN tag's subresource-integrity pair forces a CORS fetch, which a page opened from file:// is refused.
CDN_INTEGRITY = re.compile(r'\s+integrity="[^"]*"\s+crossorigin="anonymous"')


def offline(source: str) -> str:
    """GX's template or style text with each CDN address replaced by its file under `static_root`."""
    # GX 1.24 hard-codes these addresses in its templates and has no setting for them; rewriting the
    # template text as it is loaded keeps GX's own templates (whatever else a GX release changes) in use.
    for url in sorted(CDN, key=len, reverse=True):
        source = source.replace(url, "{{ static_root }}" + local_path(url))
    source = source.replace(f'"{GX_IMAGES}"', 'static_root ~ "static/images/"')
    source = source.replace(f"{GX_IMAGES}full_logo_dark.png", "{{ static_root }}static/images/logo-long.png")
    # favicon.j2 counts one folder too few for validation pages.
    source = source.replace('{{ static_images_dir + "favicon.ico" }}', "{{ static_root }}static/images/favicon.ico")
    return CDN_INTEGRITY.sub("", source)


def static_root(document) -> str:
    """The relative path from a page to the site's root (GX's own rule for its links home)."""
    get = document.get if isinstance(document, dict) else lambda name: getattr(document, name, None)
    kind = get("renderer_type") or ""
    dots = (get("expectation_suite_name") or "").count(".")
    if "ValidationResults" in kind or "ProfilingResults" in kind:
        return "../" * (dots + 4)
    if "ExpectationSuite" in kind:
        return "../" * (dots + 1)
    return "./"


class _OfflineLoader(BaseLoader):
    """Serves GX's templates (and the styles it includes) through `offline`."""

    def __init__(self, inner: BaseLoader):
        self.inner = inner

    def get_source(self, environment, template):
        source, filename, uptodate = self.inner.get_source(environment, template)
        return offline(source), filename, uptodate


class _Offline:
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.env.loader = _OfflineLoader(self.env.loader)

    def render(self, document, template=None, **kwargs):
        kwargs.setdefault("static_root", static_root(document))
        return super().render(document, template, **kwargs)


class OfflinePageView(_Offline, DefaultJinjaPageView):
    """GX's page view (validations, suites) with local assets."""


class OfflineIndexPageView(_Offline, DefaultJinjaIndexPageView):
    """GX's index page view with local assets."""
