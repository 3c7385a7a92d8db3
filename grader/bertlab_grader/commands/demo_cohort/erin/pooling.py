"""Demo cohort, hostile student: never returns."""


def masked_mean_pool(hidden_states, attention_mask):
    while True:
        pass
