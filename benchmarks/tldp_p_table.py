"""Print what the published TLDP keep probability p is for a 28x28 image (table in docs/privacy.md).

Run:  .venv/bin/python benchmarks/tldp_p_table.py
"""

import math

from ldpclient.privacy import tldp_gaussian, tldp_laplace


def main() -> None:
    print("| mechanism | eps (paper, per element) | log p | p as float64 | true per element (eps, delta) | true "
          "per record (eps, delta) |")
    print("|---|---|---|---|---|---|")
    for make in (tldp_laplace, tldp_gaussian):
        for eps in (0.1, 1.0, 10.0):
            g = make(eps).guarantee((1, 28, 28))
            lp = g.params["log_p"]
            print(
                f"| {g.mechanism} | {eps:g} | {lp:.2f} (p = 10^{lp / math.log(10):.1f}) | {g.params['p']:.3g} | "
                f"({g.epsilon_element:.4g}, {g.delta_element:.3g}) | ({g.epsilon_record:.4g}, {g.delta_record:.3g}) |"
            )


if __name__ == "__main__":
    main()
