"""Calibration test, debiased NC-ECE and an interval that carries channel-estimation error (Hanada and Futami 2026 §3,
§C.2–C.3,
§D.6).

NC-ECE = Σ_k |m_k| with the per-bin moment m_k = Σ_{i∈k}(Ỹ_i − s_i)/N (§3). Every replicate below re-estimates
the channels from its own data when they are not supplied, so the spread carries the channel error that the
bounds of §C.2–C.3 contain; supplied channels are held fixed.

Compression. Ỹ_i depends only on item i's answer pattern, so items are reduced once to cells
(fine score bin, score group, answer pattern) holding item counts and Σs, Σs². A replicate never touches items:

- bootstrap (items resampled with replacement): cell counts M ~ Multinomial(N, counts/N); the score sum of a
  cell is drawn as M·s̄_c + sqrt(M·v_c)·Z (Z standard normal, v_c the within-cell score variance), which matches
  the first two moments of the exact resample (cells are fine bins of width 1/(4B), so the spread is small);
- null (H0: P(Y=1 | s) = s): per (fine bin, group, set of annotators present) the number of positives is
  Binomial(n, s̄) (the exact Poisson-binomial has the same mean and a variance smaller by Σ(s_i − s̄)² ≤ n·h²/4,
  h = 1/(4B) the fine-bin width), then the answers of positives and negatives are Multinomial over the 2^|J|
  answer vectors of their channels. Which annotator labelled which item is kept; scores are fixed.
Channel refits are Dawid–Skene / score-group EM on the replicate's pattern counts (§F.1), vectorised over
replicates and warm-started at the point estimate. A replicate whose refit is not finite, has a gap ≤ min_gap,
or (two annotators) groups whose prevalences differ by ≤ 0.05 is *unidentified*: counted, reported and left
out of the quantiles. Both approximations are checked by the coverage and size simulations of the tests.
With K ≥ 3 estimated channels the bootstrap draws are evaluated twice: Dawid–Skene refits for the interval, and
shared-channel score-group EM refits (score groups as cells, §F.1.2) for the moments of the debiased value.

Modules: `bins` (per-bin statistics shared by both label spaces: `debiased_abs_sum`,
`debiased_normal_interval`, `bootstrap_p_value`), `resampling` (cells, bootstrap draws, answers simulated under
H0), `refits` (batched EM refits per replicate), `test` (`calibration_test`).
"""

from .bins import bootstrap_p_value, debiased_abs_sum, debiased_normal_interval, folded_normal_mean
from .refits import batched_em
from .resampling import simulate_answers
from .test import CalibrationTest, calibration_test, debias_groups

__all__ = [
    "CalibrationTest",
    "batched_em",
    "bootstrap_p_value",
    "calibration_test",
    "debias_groups",
    "debiased_abs_sum",
    "debiased_normal_interval",
    "folded_normal_mean",
    "simulate_answers",
]
