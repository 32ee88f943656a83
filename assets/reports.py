"""Reports stage: human-readable HTML summaries of each stage."""

STAGE = "reports"
