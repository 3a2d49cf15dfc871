"""One exception type for every error a user caused and can fix.

The CLI turns it into a single line on stderr and exit code 2; anything else is a bug.
"""


class SpecchatError(Exception):
    """Bad input (model, draft, prompt, decoder, config) explained in one line."""
