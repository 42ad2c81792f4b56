"""A researcher's script: argparse, mlflow.set_experiment + autolog with scikit-learn."""

import argparse

import mlflow
import numpy as np
from sklearn.linear_model import Ridge
from sklearn.metrics import mean_squared_error

p = argparse.ArgumentParser()
p.add_argument("--alpha", type=float, default=1.0)
p.add_argument("--seed", type=int, default=0)
args = p.parse_args()

mlflow.set_experiment("my-ridge-experiments")  # the habit: air keeps its own experiment
mlflow.autolog(log_models=False, log_datasets=False, silent=True)
rng = np.random.default_rng(args.seed)
X = rng.normal(size=(200, 5))
y = X @ np.array([1.0, -2.0, 0.5, 0.0, 3.0]) + rng.normal(scale=0.5, size=200)
with mlflow.start_run(run_name="ridge"):
    model = Ridge(alpha=args.alpha).fit(X[:150], y[:150])
    val_loss = float(mean_squared_error(y[150:], model.predict(X[150:])))
    mlflow.log_metric("val_loss", val_loss)
    with open("coefs.txt", "w") as f:
        f.write(" ".join(f"{c:.4f}" for c in model.coef_))
    mlflow.log_artifact("coefs.txt")
print(f"val_loss {val_loss:.5f}")
