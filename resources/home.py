"""The base of every resource rooted at one ``$NOISYCAL_HOME``."""

from __future__ import annotations

import dagster as dg

from noisycal_platform.paths import HomeLayout

__all__ = ["HomeResource"]


class HomeResource(dg.ConfigurableResource):
    """A resource configured with a home folder; ``layout`` names the folders inside it."""

    home: str

    @property
    def layout(self) -> HomeLayout:
        return HomeLayout.at(self.home)
