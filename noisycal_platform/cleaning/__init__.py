"""Dataset cleaning (SelfClean protocol, Gröger et al. 2023): images, SSL encoder, rankings, confirmation.

Import submodules directly (``noisycal_platform.cleaning.images`` ...); nothing is re-exported here so
that importing the package stays cheap (no torch).
"""
