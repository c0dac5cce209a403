def get_final_output():
    """Everything the default target builds (grows as the workflow lands)."""
    return []
