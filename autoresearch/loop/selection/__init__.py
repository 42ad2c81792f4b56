"""Which trials a study keeps and which it names the winner: the acceptance rules, the
confirmation runs of near-wins, and the final re-evaluation (with the held-out evaluation)."""
