"""tests/backend_cases/layers_dual_encoder.py with kitm's own TripletLoss (sum over all negatives)."""

import layers_dual_encoder as case

case.LOSS = "triplet"
cases = case.cases
