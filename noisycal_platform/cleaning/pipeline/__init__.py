"""The pure functions behind the cleaning assets (Gröger et al. 2023 §3, the SelfClean protocol): frames in, frames
out, no
Dagster and no inbox reads. One module per asset module of ``assets/cleaning/``, so an asset's formula is found in
the file of the same name:

- :mod:`.embeddings`: ``cleaning/ssl_encoder``, ``cleaning/embeddings``;
- :mod:`.rankings`: ``cleaning/rank_irrelevant``, ``cleaning/rank_near_duplicates``, ``cleaning/rank_label_errors``
  (and which kernel computes them, here or on a Dask client);
- :mod:`.confirmation`: ``cleaning/confirmation_queue``, ``cleaning/cleaned_file_list``, the queue refill depth;
- :mod:`.outcomes`: ``cleaning/label_error_prevalence`` ... ``cleaning/ranking_vs_truth``;
- :mod:`.report`: ``reports/cleaning``.

Beside them: :mod:`.schemas` (every cleaning table's columns, once) and :mod:`.protocol_tables` (the protocol's
tables from rankings and answers: queue, verdicts, removed and kept files, prevalence, Table 1). The protocol's
rules (effective answer, panel, unanimous, majority, stopping rule) are in :mod:`noisycal_platform.cleaning.protocol`.
"""
