"""NeoRL-2's Simglucose: basal insulin control of a virtual type-1-diabetes patient.

Paper: S. Gao et al., "NeoRL-2", 2025 (arXiv:2503.19267). Reference: github.com/polixir/
NeoRL2 @ b50d91d, ``neorl2/envs/simglucose.py`` with its vendored, modified copy of
simglucose (``neorl2/envs/data/simglucose``: J. Xie, "Simglucose v0.2.1", 2018, the
UVa/Padova 2008 simulator of C. Dalla Man et al.) and ``envs/reward/simglucose_reward.py``
/ ``envs/terminated/simglucose_terminated.py``. Reimplemented here from those files and
checked against them on the same patients, start hours and actions, and against the
authors' released data (a whole day of their training file replayed from its actions:
tests/test_neorl2.py, tests/golden/neorl2.json). Registered (``rlcore.envs.neorl2``) as ``neorl2/Simglucose-v0`` (480 steps of 3
minutes: one day); ``env=Simglucose`` on the command line.

* The patient: the 13-state UVa/Padova glucose-insulin model (stomach, gut, plasma and
  tissue glucose, insulin kinetics and action, subcutaneous insulin and glucose),
  integrated one minute at a time with scipy's dopri5 (``scipy.integrate.ode``, as the
  reference). Each episode draws one of 15 patients ("train": adolescent, adult and child
  #001-#005; ``mode="val"``: #006-#010; parameters below, from simglucose's
  ``vpatient_params.csv``) and a start hour in 0-23, and starts from the patient's
  steady state. Meals (NeoRL-2 fixes simglucose's random ones at their means): 45, 10,
  70, 10, 80 and 10 g of carbohydrate at 7:00, 9:30, 12:00, 15:00, 18:00 and 21:30,
  eaten at 5 g/min.
* A step: action a in [-1, 1] -> basal insulin (a + 1) / 2 * 5 U/min, the Insulet pump's
  range [0, 30], 3 one-minute model steps; the sensor (Dexcom, no noise in NeoRL-2)
  reads the subcutaneous glucose every 3 minutes, clipped to [10, 600] mg/dL.
  Observation: [the mean of the 3 minutes' sensor readings, the patient's 30 parameters]
  (31). Reward 1 + (risk(g) - risk(g')) / 100 on the readings g -> g', with Kovatchev's
  risk 10 (1.509 (ln(g)^1.084 - 5.381))^2; -15 when g' <= 40, 0 when g' >= 600.
  Terminates when the minutes' mean blood glucose leaves [40, 600] (the reference env's
  rule; the reference's terminated module, used for model rollouts, reads the sensor
  value in the observation: ``rlcore.model_based.termination_rule``).

Normalised scores: NeoRL-2's (9.75, 475) (``rlcore.evaluation.D4RL_REF_SCORES``).

Departures: the patient and the start hour come from the env's seeded generator (the
reference draws them from numpy's unseeded global state); ``reset(options={"patient":
name, "hour": h})`` fixes them. Observations are float32 (the reference: float64) in an
unbounded Box (the reference's bounds are loose guesses some patients exceed). The
action is taken as a float (the reference passes its 1-element array through; numpy 2
refuses it, so the reference as run for the parity test casts it too). Parameters are
read as Python floats (the reference parses the CSV with pandas: a last-digit difference
at most).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import gymnasium as gym
import numpy as np
from scipy.integrate import ode

SENSOR_PERIOD, SENSOR_RANGE = 3, (10.0, 600.0)  # Dexcom: minutes, mg/dL
MAX_BASAL, EAT_RATE = 30.0, 5.0  # Insulet's largest basal (U/min); g of CHO a minute
MEALS = {420: 45.0, 570: 10.0, 720: 70.0, 900: 10.0, 1080: 80.0, 1290: 10.0}  # min -> g
TRAIN = tuple(f"{group}#{i:03d}" for group in ("adolescent", "adult", "child") for i in range(1, 6))
VAL = tuple(f"{group}#{i:03d}" for group in ("adolescent", "adult", "child") for i in range(6, 11))
# the patient's parameters as the observation lists them (NeoRL-2's order), then the two
# the model needs beside them
PROPERTIES = 30

# fmt: off
PARAMETERS = ('BW', 'Fsnc', 'Ib', 'Km0', 'Vi', 'Vm0', 'Vmx', 'b', 'd', 'f', 'k1', 'k2', 'ka1', 'ka2', 'kabs', 'kd', 'ke1', 'ke2', 'ki', 'kmax', 'kp1', 'kp2', 'kp3', 'ksc', 'm1', 'm2', 'm30', 'm4', 'p2u', 'u2ss', 'kmin', 'Vg')
PATIENTS: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {
    "adolescent#001": (
        (0.0, 0.0, 0.0, 250.621836, 176.506559902, 4.697517762, 0.0, 97.554, 97.554, 3.19814917262, 57.951224472, 93.2258828462, 250.621836),
        (68.706, 1.0, 97.554, 260.89, 0.048153, 5.92854753098, 0.074667, 0.83072, 0.32294, 0.9, 0.057252, 0.067738, 0.0025, 0.0115, 0.091043, 0.0185, 0.0005, 339.0, 0.0088838, 0.015865, 11.5048231338, 0.023318, 0.023253, 0.056, 0.15221, 0.259067825939, 0.228315, 0.103627130376, 0.021344, 1.21697571391, 0.0083338, 1.6818),
    ),
    "adolescent#002": (
        (0.0, 0.0, 0.0, 280.236267, 30.9541309204, 6.01930508, 0.0, 119.18, 119.18, 4.96870842374, 77.8484760287, 47.1721248798, 280.236267),
        (51.046, 1.0, 119.18, 223.01, 0.050506, 12.228853658, 0.038897, 0.76876, 0.18887, 0.9, 0.036957, 0.28643, 0.0068, 0.0269, 0.12473, 0.0163, 0.0005, 339.0, 0.0084603, 0.034573, 4.19657924407, 0.0026879, 0.0079949, 0.1314, 0.14477, 0.298755383281, 0.217155, 0.119502153313, 0.017681, 1.79829979626, 0.006983, 1.8387),
    ),
    "adolescent#003": (
        (0.0, 0.0, 0.0, 326.55338, 383.368339011, 3.48788064, 0.0, 101.28, 101.28, 5.27738007224, 80.7969837316, 81.3429092974, 326.55338),
        (44.791, 1.0, 101.28, 216.57, 0.034438, 2.84798631515, 0.060762, 0.56424, 0.14423, 0.9, 0.10004, 0.080467, 0.003, 0.0148, 0.046752, 0.0149, 0.0005, 339.0, 0.0094229, 0.046773, 6.58878876028, 0.0060918, 0.017571, 0.1059, 0.10962, 0.414654673732, 0.16443, 0.165861869493, 0.065784, 1.4462660088, 0.0066262, 2.2382),
    ),
    "adolescent#004": (
        (0.0, 0.0, 0.0, 248.11709, 214.758607646, 4.31676536, 0.0, 108.88, 108.88, 3.95608314762, 97.383030189, 124.746856854, 248.11709),
        (49.564, 1.0, 108.88, 248.78, 0.039647, 4.84283999312, 0.056525, 0.77607, 0.14467, 0.9, 0.072211, 0.07298, 0.0026, 0.0121, 0.14452, 0.0155, 0.0005, 339.0, 0.0058346, 0.030833, 6.0416845715, 0.0046256, 0.015157, 0.0751, 0.17822, 0.408322597923, 0.26733, 0.163329039169, 0.037027, 1.76263284642, 0.0096077, 1.7147),
    ),
    "adolescent#005": (
        (0.0, 0.0, 0.0, 279.047113, 144.715758769, 5.16289777, 0.0, 113.09, 113.09, 4.63464033793, 83.8603979178, 71.5419213875, 279.047113),
        (47.074, 1.0, 113.09, 278.74, 0.045653, 5.34982624105, 0.050384, 0.98829, 0.13898, 0.9, 0.079271, 0.14022, 0.0032, 0.0177, 1.2323, 0.0151, 0.0005, 339.0, 0.010166, 0.025659, 4.6422316887, 0.0039814, 0.0062157, 0.0866, 0.13245, 0.297244948528, 0.198675, 0.118897979411, 0.032703, 1.5346452819, 0.025281, 2.0071),
    ),
    "adolescent#006": (
        (0.0, 0.0, 0.0, 257.421705, 162.558570565, 8.154419, 0.0, 113.0, 113.0, 1.7150416755, 79.9949521754, 52.7439245113, 257.421705),
        (45.408, 1.0, 113.0, 205.67, 0.072163, 6.32445379807, 0.043789, 0.62856, 0.17249, 0.9, 0.06398, 0.084141, 0.0061, 0.0273, 0.044109, 0.018, 0.0005, 339.0, 0.044238, 0.058757, 7.66523093275, 0.012289, 0.0062812, 0.0737, 0.44964, 0.236421300822, 0.67446, 0.0945685203288, 0.046778, 1.92787834743, 0.0075623, 1.9115),
    ),
    "adolescent#007": (
        (0.0, 0.0, 0.0, 238.918844, 87.9615903151, 5.2342344, 0.0, 111.9, 111.9, 4.7237153349, 94.4307701512, 88.4032741841, 238.918844),
        (37.898, 1.0, 111.9, 213.24, 0.046776, 6.95942524417, 0.03753, 0.63139, 0.17323, 0.9, 0.065101, 0.15372, 0.0041, 0.0188, 0.053959, 0.0176, 0.0005, 339.0, 0.0058301, 0.046226, 6.42260586185, 0.0096939, 0.0095992, 0.0503, 0.17352, 0.391489481686, 0.26028, 0.156595792674, 0.028587, 2.04914771228, 0.0083388, 1.6459),
    ),
    "adolescent#008": (
        (0.0, 0.0, 0.0, 263.83812, 33.9274151265, 4.730160786, 0.0, 82.914, 82.914, 2.58030593927, 64.7483947298, 75.6122193488, 263.83812),
        (41.218, 1.0, 82.914, 216.9, 0.057049, 14.202068229, 0.050245, 0.68583, 0.13088, 0.9, 0.033578, 0.2045, 0.0035, 0.0149, 0.031127, 0.0174, 0.0005, 339.0, 0.015816, 0.051587, 4.32566243169, 0.0038941, 0.0045499, 0.0804, 0.20978, 0.286087833178, 0.31467, 0.114435133271, 0.024807, 1.35324144985, 0.0085102, 1.8284),
    ),
    "adolescent#009": (
        (0.0, 0.0, 0.0, 241.4475, 184.846172962, 4.707832836, 0.0, 84.982, 84.982, 4.62123641991, 71.2301660032, 105.269360376, 241.4475),
        (43.885, 1.0, 84.982, 223.83, 0.055398, 7.10273332804, 0.076427, 0.87667, 0.1589, 0.9, 0.074658, 0.080139, 0.0027, 0.0113, 0.20973, 0.0167, 0.0005, 339.0, 0.0078732, 0.027936, 9.971336301, 0.014674, 0.026073, 0.0912, 0.11961, 0.29352469992, 0.179415, 0.117409879968, 0.035186, 1.38186522046, 0.012496, 1.75),
    ),
    "adolescent#010": (
        (0.0, 0.0, 0.0, 267.183741, 169.7110728, 6.32186544, 0.0, 108.24, 108.24, 3.58883085798, 93.319683293, 77.6764993884, 267.183741),
        (47.378, 1.0, 108.24, 231.53, 0.058406, 4.32919618197, 0.065509, 0.90795, 0.26552, 0.9, 0.090215, 0.13124, 0.0034, 0.0173, 0.80212, 0.0144, 0.0005, 339.0, 0.010331, 0.017759, 5.08455080263, 0.0028192, 0.01386, 0.1045, 0.18514, 0.262753198147, 0.27771, 0.105101279259, 0.038376, 1.66109036262, 0.010463, 1.8443),
    ),
    "adult#001": (
        (0.0, 0.0, 0.0, 265.370112, 162.457097269, 5.5043265, 0.0, 100.25, 100.25, 3.20762505142, 72.4341762342, 141.153779328, 265.370112),
        (102.32, 1.0, 100.25, 253.52, 0.054906, 3.2667306607, 0.031319, 0.70391, 0.21057, 0.9, 0.058138, 0.087114, 0.0019, 0.0078, 0.08906, 0.0152, 0.0005, 339.0, 0.0046374, 0.046122, 4.73140582528, 0.00469, 0.01208, 0.0766, 0.15446, 0.225027424083, 0.23169, 0.090010969633, 0.027802, 1.2386244136, 0.0037927, 1.9152),
    ),
    "adult#002": (
        (0.0, 0.0, 0.0, 228.74478, 105.42424102, 4.2367599, 0.0, 107.07, 107.07, 3.00055352824, 65.2223493778, 53.2999844378, 228.74478),
        (111.1, 1.0, 107.07, 223.52, 0.03957, 3.94361507564, 0.041095, 0.62708, 0.20388, 0.9, 0.054895, 0.10712, 0.0037, 0.0186, 0.021419, 0.0152, 0.0005, 339.0, 0.0029398, 0.046859, 4.89081778378, 0.006551, 0.010539, 0.1043, 0.16433, 0.290954038543, 0.246495, 0.116381615417, 0.023888, 1.23270240324, 0.0065141, 1.6764),
    ),
    "adult#003": (
        (0.0, 0.0, 0.0, 273.07644, 58.5083508878, 4.7787333, 0.0, 131.45, 131.45, 4.76800378515, 86.0119697596, 89.3201224427, 273.07644),
        (81.631, 1.0, 131.45, 244.83, 0.036354, 9.27149654129, 0.074874, 0.86326, 0.20675, 0.9, 0.055487, 0.22841, 0.0041, 0.0156, 0.16971, 0.0162, 0.0005, 339.0, 0.016192, 0.042043, 4.73543373289, 0.0025593, 0.009496, 0.0932, 0.14648, 0.365377784552, 0.21972, 0.146151113821, 0.037892, 1.74604298612, 0.0056532, 1.8564),
    ),
    "adult#004": (
        (0.0, 0.0, 0.0, 284.241455193, 206.107511651, 6.64995399539, 0.0, 83.69716464, 83.69716464, 1.67041318173, 57.5206305277, 85.0483608517, 284.241455193),
        (63.0, 1.0, 83.69716464, 246.8818868, 0.07945256, 4.36659587223, 0.1086259, 0.637997241, 0.092495502, 0.9, 0.093572522, 0.119405713, 0.0038, 0.014, 0.080911441, 0.0207, 0.0005, 339.0, 0.010115704, 0.058161342, 4.33596977264, 0.003087739, 0.005633774, 0.0776, 0.337462722, 0.211919578527, 0.506194083, 0.0847678314109, 0.042193533, 1.40925544793, 0.00861298, 1.886280201),
    ),
    "adult#005": (
        (0.0, 0.0, 0.0, 269.532164, 85.3085339165, 4.23964153, 0.0, 91.787, 91.787, 1.76058270751, 67.0669032991, 59.1299916661, 269.532164),
        (94.074, 1.0, 91.787, 240.43, 0.04619, 5.18303932372, 0.024825, 0.7092, 0.18486, 0.9, 0.067334, 0.19683, 0.0038, 0.0169, 0.039026, 0.0149, 0.0005, 339.0, 0.010603, 0.046023, 4.15214768637, 0.0042297, 0.0071329, 0.0898, 0.28494, 0.295815361468, 0.42741, 0.118326144587, 0.036957, 1.25415109169, 0.0045175, 1.8892),
    ),
    "adult#006": (
        (0.0, 0.0, 0.0, 261.839456, 257.61167307, 7.48715156, 0.0, 138.04, 138.04, 5.63793484811, 169.421772684, 174.84326941, 261.839456),
        (66.097, 1.0, 138.04, 188.77, 0.054239, 2.11848410047, 0.045288, 0.96206, 0.1446, 0.9, 0.073784, 0.070249, 0.0025, 0.0125, 0.58151, 0.0129, 0.0005, 339.0, 0.011951, 0.029515, 3.56213180523, 0.0026595, 0.0046593, 0.0536, 0.18511, 0.348476356919, 0.277665, 0.139390542768, 0.053212, 2.60909529933, 0.014852, 1.9304),
    ),
    "adult#007": (
        (0.0, 0.0, 0.0, 249.82522, 182.033173951, 7.8531681, 0.0, 118.61, 118.61, 2.13475224365, 83.519216599, 94.8225692214, 249.82522),
        (91.229, 1.0, 118.61, 212.78, 0.06621, 4.06279812296, 0.10286, 0.93322, 0.10058, 0.9, 0.091015, 0.11462, 0.0029, 0.0133, 0.58034, 0.0151, 0.0005, 339.0, 0.01011, 0.032851, 4.30434014431, 0.0024355, 0.0069361, 0.0958, 0.28169, 0.19143177373, 0.422535, 0.076572709492, 0.04091, 1.50334589878, 0.013232, 1.847),
    ),
    "adult#008": (
        (0.0, 0.0, 0.0, 225.085945, 142.685395142, 6.7813815, 0.0, 106.1, 106.1, 2.68222815336, 55.8011284167, 51.2272654317, 225.085945),
        (102.79, 1.0, 106.1, 264.01, 0.063915, 5.30582318745, 0.036819, 0.81105, 0.17117, 0.9, 0.049881, 0.065641, 0.0031, 0.0183, 0.14058, 0.0168, 0.0005, 339.0, 0.0049051, 0.024009, 7.20034121328, 0.0080204, 0.023879, 0.1519, 0.1656, 0.163748707471, 0.2484, 0.0654994829883, 0.035026, 1.11044245549, 0.0048009, 1.5715),
    ),
    "adult#009": (
        (0.0, 0.0, 0.0, 265.56894, 73.3005106164, 4.21939736, 0.0, 115.24, 115.24, 5.11019991428, 73.7754104129, 47.8945204697, 265.56894),
        (74.604, 1.0, 115.24, 246.44, 0.036614, 4.74329344121, 0.016839, 0.76528, 0.33742, 0.9, 0.044387, 0.14598, 0.0045, 0.0248, 0.21433, 0.0161, 0.0005, 339.0, 0.0048098, 0.02187, 4.33689313278, 0.0041804, 0.0098864, 0.1216, 0.11896, 0.360187326492, 0.17844, 0.144074930597, 0.024128, 1.51977345451, 0.0028379, 1.8305),
    ),
    "adult#010": (
        (0.0, 0.0, 0.0, 317.320929, 65.7778760652, 4.413951432, 0.0, 92.373, 92.373, 3.44056216842, 70.7300184239, 67.3818518713, 317.320929),
        (73.859, 1.0, 92.373, 246.13, 0.047784, 6.44605134867, 0.054346, 0.83824, 0.13833, 0.9, 0.036808, 0.1569, 0.0034, 0.0169, 0.17966, 0.0161, 0.0005, 339.0, 0.008067, 0.039728, 3.90356311543, 0.0034404, 0.0048981, 0.0893, 0.16035, 0.31247180231, 0.240525, 0.124988720924, 0.016772, 1.37923535927, 0.0091182, 2.0763),
    ),
    "child#001": (
        (0.0, 0.0, 0.0, 271.031853002, 137.60135923, 7.39593844866, 0.0, 110.3648078, 110.3648078, 1.45378246253, 66.4071837276, 35.7997574828, 271.031853002),
        (34.55648182, 1.0, 110.3648078, 185.8820726, 0.067013558, 3.65981019497, 0.152308243, 0.754915658, 0.089529251, 0.9, 0.070852519, 0.128243663, 0.0041, 0.0243, 0.127494918, 0.0131, 0.0005, 339.0, 0.010902381, 0.068714386, 4.1652828427, 0.002522654, 0.008379266, 0.0684, 0.314270832, 0.154436596254, 0.471406248, 0.0617746385016, 0.042802541, 1.14220356012, 0.007997018, 1.919425692),
    ),
    "child#002": (
        (0.0, 0.0, 0.0, 264.366111171, 384.348662938, 3.90569033089, 0.0, 104.3351578, 104.3351578, 2.72414938639, 68.8906316382, 96.4468842935, 264.366111171),
        (28.53257352, 1.0, 104.3351578, 225.7855513, 0.037434077, 4.09430322593, 0.062822379, 0.83267505, 0.168209241, 0.9, 0.107264417, 0.067069068, 0.0033, 0.012, 0.547271474, 0.0168, 0.0005, 339.0, 0.006425442, 0.020390384, 8.24333692076, 0.008198363, 0.023930547, 0.0617, 0.203322432, 0.354534430182, 0.304983648, 0.141813772073, 0.067564011, 1.38470169593, 0.011239842, 1.843653308),
    ),
    "child#003": (
        (0.0, 0.0, 0.0, 233.426051066, 90.1365395679, 5.59519238156, 0.0, 96.38653336, 96.38653336, 1.79509115018, 26.8346975874, 17.5645293299, 233.426051066),
        (41.23304017, 1.0, 96.38653336, 260.6177434, 0.058049524, 4.54376905737, 0.063997085, 0.595219309, 0.119133938, 0.9, 0.06352621, 0.151559162, 0.0081, 0.0275, 0.099733323, 0.018, 0.0005, 339.0, 0.002815868, 0.053017395, 4.00983676085, 0.003133049, 0.011524925, 0.0678, 0.156066862, 0.125176322684, 0.234100293, 0.0500705290734, 0.06520304, 0.70038560703, 0.006550925, 1.744184259),
    ),
    "child#004": (
        (0.0, 0.0, 0.0, 276.767871791, 340.969887233, 7.52405238182, 0.0, 124.0496989, 124.0496989, 2.42440010999, 67.2868436092, 57.1763852431, 276.767871791),
        (35.5165043, 1.0, 124.0496989, 203.0817342, 0.060653532, 2.18057641516, 0.145715992, 0.778097629, 0.095402818, 0.9, 0.07313696, 0.055357799, 0.0042, 0.0193, 0.233436885, 0.0164, 0.0005, 339.0, 0.0074842, 0.030653413, 4.40387455417, 0.002691865, 0.010417071, 0.1077, 0.228693106, 0.184223727854, 0.343039659, 0.0736894911417, 0.081707271, 1.38610897835, 0.016230469, 2.069817306),
    ),
    "child#005": (
        (0.0, 0.0, 0.0, 256.487996958, 92.9517456616, 4.34091457232, 0.0, 119.291148, 119.291148, 1.89567530255, 58.2559242046, 57.6704375292, 256.487996958),
        (37.78855797, 1.0, 119.291148, 230.2404808, 0.036389243, 5.49996517414, 0.109076135, 0.960638488, 0.201231635, 0.9, 0.05596048, 0.137397884, 0.0037, 0.0199, 0.330887558, 0.0197, 0.0005, 339.0, 0.00697472, 0.013142286, 3.93405394015, 0.001989104, 0.007058817, 0.1244, 0.287641797, 0.314032585456, 0.4314626955, 0.125613034182, 0.042999249, 1.36318862639, 0.012509418, 1.860357249),
    ),
    "child#006": (
        (0.0, 0.0, 0.0, 242.193130522, 102.965023189, 5.99228401573, 0.0, 100.4220798, 100.4220798, 1.70344929141, 47.1524941769, 39.6456294323, 242.193130522),
        (41.00214896, 1.0, 100.4220798, 238.0059149, 0.059670981, 5.77156024175, 0.081494569, 0.632999169, 0.148305924, 0.9, 0.056671769, 0.116375837, 0.004, 0.0201, 0.052654086, 0.0169, 0.0005, 339.0, 0.009870995, 0.04693107, 4.76073306104, 0.002702742, 0.013575452, 0.0943, 0.231409795, 0.164459349008, 0.3471146925, 0.0657837396032, 0.067333073, 0.985487128297, 0.006665559, 1.705578497),
    ),
    "child#007": (
        (0.0, 0.0, 0.0, 231.016602659, 114.376709557, 7.73719352451, 0.0, 104.4935749, 104.4935749, 1.42326269189, 51.5538430194, 59.1246870991, 231.016602659),
        (45.5397665, 1.0, 104.4935749, 225.0909871, 0.074044682, 8.57503740466, 0.073813859, 0.951778007, 0.142843935, 0.9, 0.064145355, 0.104299715, 0.0035, 0.0143, 0.032863284, 0.0164, 0.0005, 339.0, 0.011469231, 0.066365919, 5.56798696445, 0.004102445, 0.006996318, 0.0792, 0.288329479, 0.132596072831, 0.4324942185, 0.0530384291325, 0.043035605, 1.02592147609, 0.008004161, 1.731756461),
    ),
    "child#008": (
        (0.0, 0.0, 0.0, 307.226606718, 74.4414259764, 5.31506447574, 0.0, 100.6946287, 100.6946287, 2.63125641834, 82.3409671628, 119.914029849, 307.226606718),
        (23.73405728, 1.0, 100.6946287, 224.1030036, 0.052783992, 7.60444513533, 0.080044566, 0.62906403, 0.212803068, 0.9, 0.040400777, 0.141265983, 0.0024, 0.0103, 0.125140051, 0.015, 0.0005, 339.0, 0.008655602, 0.042336118, 5.46619598839, 0.004799275, 0.010880209, 0.1064, 0.217802084, 0.269560761712, 0.326703126, 0.107824304685, 0.034704085, 1.43273282863, 0.007525726, 2.030459938),
    ),
    "child#009": (
        (0.0, 0.0, 0.0, 260.782139377, 378.358611322, 5.4319759636, 0.0, 107.0898879, 107.0898879, 3.36507807403, 54.5323874938, 31.539253961, 260.782139377),
        (35.53392558, 1.0, 107.0898879, 268.3161828, 0.050723519, 4.08700015724, 0.113583485, 0.808284982, 0.134892405, 0.9, 0.080982249, 0.049496663, 0.0047, 0.0268, 0.163226227, 0.0155, 0.0005, 339.0, 0.012533054, 0.067388647, 8.92304270886, 0.015376442, 0.01421148, 0.0888, 0.130939515, 0.202790703559, 0.1964092725, 0.0811162814237, 0.041367326, 1.10155422738, 0.013139851, 1.899739159),
    ),
    "child#010": (
        (0.0, 0.0, 0.0, 247.420085943, 118.336141455, 6.56877346313, 0.0, 105.2945301, 105.2945301, 2.3252309291, 60.0485027983, 54.4625955612, 247.420085943),
        (35.21305847, 1.0, 105.2945301, 226.4829255, 0.062384755, 6.92447418397, 0.09197894, 0.678361137, 0.097283767, 0.9, 0.058760479, 0.102776369, 0.0032, 0.0172, 0.217656178, 0.0156, 0.0005, 339.0, 0.007965987, 0.036428394, 4.82258449688, 0.003572135, 0.005341234, 0.0947, 0.194202105, 0.171860372251, 0.2913031575, 0.0687441489005, 0.036427048, 1.12891185261, 0.019217714, 1.813728433),
    ),
}
# fmt: on


def risk(glucose: np.ndarray) -> np.ndarray:
    """Kovatchev's blood-glucose risk of readings (mg/dL)."""
    return 10 * (1.509 * (np.log(glucose) ** 1.084 - 5.381)) ** 2


def reward(glucose: np.ndarray, next_glucose: np.ndarray) -> np.ndarray:
    """NeoRL-2's reward from the sensor readings g -> g' (module docstring)."""
    value = (risk(glucose) - risk(next_glucose) + 100) / 100
    value = np.where(next_glucose <= 40, -15.0, value)
    return np.where(next_glucose >= SENSOR_RANGE[1], 0.0, value)


class Patient:
    """One virtual patient: the UVa/Padova model's 13 states, integrated a minute at a time
    (``step``), and the bookkeeping of the meal being eaten."""

    def __init__(self, name: str) -> None:
        if name not in PATIENTS:
            raise ValueError(f"unknown patient {name!r}: one of {sorted(PATIENTS)}")
        initial, values = PATIENTS[name]
        self.name, self.params = name, dict(zip(PARAMETERS, values, strict=True))
        self.properties = np.array(values[:PROPERTIES])
        self.solver = ode(self.derivatives).set_integrator("dopri5")
        self.solver.set_initial_value(np.array(initial), 0.0)
        self.last_stomach = initial[0] + initial[1]  # mg in the stomach when a meal began
        self.food_taken = 0.0  # g eaten since then
        self.last_carbs, self.eating, self.planned = 0.0, False, 0.0

    @property
    def minute(self) -> float:
        return self.solver.t

    @property
    def glucose(self) -> float:
        """Subcutaneous glucose (mg/dL): what the sensor reads."""
        return float(self.solver.y[12] / self.params["Vg"])

    def step(self, carbs: float, insulin: float) -> None:
        """One minute: ``carbs`` g of meal announced now (eaten at 5 g/min), ``insulin`` U/min."""
        self.planned += carbs
        eat = min(EAT_RATE, self.planned) if self.planned > 0 else 0.0
        self.planned = max(0.0, self.planned - eat) if self.planned > 0 else self.planned
        if eat > 0 and self.last_carbs <= 0:  # a meal begins
            self.last_stomach = self.solver.y[0] + self.solver.y[1]
            self.food_taken, self.eating = 0.0, True
        if self.eating:
            self.food_taken += eat
        if eat <= 0 and self.last_carbs > 0:
            self.eating = False
        self.last_carbs = eat
        self.solver.set_f_params(eat, insulin, self.last_stomach, self.food_taken)
        if not self.solver.successful():
            raise RuntimeError(f"the glucose model's integration failed at minute {self.minute}")
        self.solver.integrate(self.solver.t + 1)

    def derivatives(self, t: float, x: np.ndarray, carbs: float, insulin: float,
                    last_stomach: float, food_taken: float) -> np.ndarray:  # fmt: skip
        """dx/dt of the UVa/Padova model (the reference's ``T1DPatient.model``)."""
        p = self.params
        dx = np.zeros(13)
        meal = carbs * 1000  # g -> mg
        insulin = insulin * 6000 / p["BW"]  # U/min -> pmol/kg/min
        stomach = x[0] + x[1]
        dose = last_stomach + food_taken * 1000  # mg
        dx[0] = -p["kmax"] * x[0] + meal
        if dose > 0:
            aa = 5 / 2 / (1 - p["b"]) / dose
            cc = 5 / 2 / p["d"] / dose
            kgut = p["kmin"] + (p["kmax"] - p["kmin"]) / 2 * (
                np.tanh(aa * (stomach - p["b"] * dose)) - np.tanh(cc * (stomach - p["d"] * dose))
                + 2)  # fmt: skip
        else:
            kgut = p["kmax"]
        dx[1] = p["kmax"] * x[0] - x[1] * kgut
        dx[2] = kgut * x[1] - p["kabs"] * x[2]
        appearance = p["f"] * p["kabs"] * x[2] / p["BW"]
        production = p["kp1"] - p["kp2"] * x[3] - p["kp3"] * x[8]
        excretion = p["ke1"] * (x[3] - p["ke2"]) if x[3] > p["ke2"] else 0
        dx[3] = max(production, 0) + appearance - p["Fsnc"] - excretion - p["k1"] * x[3] \
            + p["k2"] * x[4]  # fmt: skip
        dx[3] = (x[3] >= 0) * dx[3]
        utilisation = (p["Vm0"] + p["Vmx"] * x[6]) * x[4] / (p["Km0"] + x[4])
        dx[4] = -utilisation + p["k1"] * x[3] - p["k2"] * x[4]
        dx[4] = (x[4] >= 0) * dx[4]
        dx[5] = -(p["m2"] + p["m4"]) * x[5] + p["m1"] * x[9] + p["ka1"] * x[10] \
            + p["ka2"] * x[11]  # fmt: skip
        plasma_insulin = x[5] / p["Vi"]
        dx[5] = (x[5] >= 0) * dx[5]
        dx[6] = -p["p2u"] * x[6] + p["p2u"] * (plasma_insulin - p["Ib"])
        dx[7] = -p["ki"] * (x[7] - plasma_insulin)
        dx[8] = -p["ki"] * (x[8] - x[7])
        dx[9] = -(p["m1"] + p["m30"]) * x[9] + p["m2"] * x[5]
        dx[9] = (x[9] >= 0) * dx[9]
        dx[10] = insulin - (p["ka1"] + p["kd"]) * x[10]
        dx[10] = (x[10] >= 0) * dx[10]
        dx[11] = p["kd"] * x[10] - p["ka2"] * x[11]
        dx[11] = (x[11] >= 0) * dx[11]
        dx[12] = -p["ksc"] * x[12] + p["ksc"] * x[3]
        dx[12] = (x[12] >= 0) * dx[12]
        return dx


def pump_basal(request: float) -> float:
    """The Insulet pump's basal: rounded to its 0.05 pmol increment, clipped to [0, 30]."""
    amount = np.round(request * 6000 / 0.05) * 0.05 / 6000
    return float(max(min(amount, MAX_BASAL), 0.0))


class SimglucoseEnv(gym.Env):
    """NeoRL-2's Simglucose (module docstring): one day of basal insulin control."""

    metadata: dict[str, Any] = {"render_modes": []}
    # rlcore.envs.env_state.UnsavedState
    unsaved_state = "the patient's ODE solver (scipy's dopri5) cannot be saved"

    def __init__(self, mode: str = "train") -> None:
        if mode not in ("train", "val"):
            raise ValueError(f"mode={mode!r}: 'train' (patients #001-#005) or 'val' (#006-#010)")
        self.patients = TRAIN if mode == "train" else VAL
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (1 + PROPERTIES,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.patient: Patient | None = None

    def _obs(self) -> np.ndarray:
        assert self.patient is not None
        return np.concatenate([[self.reading], self.patient.properties]).astype(np.float32)

    def _sensor(self) -> float:
        """The sensor's reading: a new one every 3 minutes, else the last."""
        assert self.patient is not None
        if self.patient.minute % SENSOR_PERIOD == 0:
            self.last_reading = float(np.clip(self.patient.glucose, *SENSOR_RANGE))
        return self.last_reading

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        options = dict(options or {})
        hour = options.pop("hour", None)
        hour = int(self.np_random.integers(0, 24)) if hour is None else int(hour)
        name = options.pop("patient", None)
        if name is None:
            name = self.patients[int(self.np_random.integers(len(self.patients)))]
        if options:
            raise ValueError(f"unknown reset options {sorted(options)}: 'patient', 'hour'")
        self.patient, self.start = Patient(name), datetime(2018, 1, 1, hour)
        self.reading = self._sensor()
        return self._obs(), {"patient": name, "hour": hour}

    def _meal(self) -> float:
        assert self.patient is not None
        now = self.start + timedelta(minutes=self.patient.minute)
        minute = (now - datetime.combine(now.date(), datetime.min.time())).total_seconds() // 60
        return MEALS.get(int(minute), 0.0)

    def step(self, action: np.ndarray):
        assert self.patient is not None, "call reset() first"
        action = np.clip(action, -1, 1)
        request = float(np.asarray((action + 1) / 2 * 5).reshape(-1)[0])  # the action's dtype
        insulin = pump_basal(request)
        glucose = readings = 0.0
        for _ in range(SENSOR_PERIOD):
            self.patient.step(self._meal(), insulin)
            glucose += self.patient.glucose / SENSOR_PERIOD
            readings += self._sensor() / SENSOR_PERIOD
        previous, self.reading = self.reading, readings
        value = float(reward(np.float64(previous), np.float64(readings)))  # as the reference
        terminated = bool(glucose < 40 or glucose > 600)
        return self._obs(), value, terminated, False, {"bg": glucose, "insulin": insulin}
