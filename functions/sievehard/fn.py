"""sievehard: counts the primes below the number in the body (default 1 000 000).

An empty body or one that is not a whole number uses the default; numbers above
100 000 000 are refused (the sieve needs one byte per number).
"""

DEFAULT = 1_000_000
MAXIMUM = 100_000_000


def count_primes(limit):
    """Number of primes p with p < limit."""
    if limit < 3:
        return 0
    is_prime = bytearray([1]) * limit
    is_prime[0] = is_prime[1] = 0
    for i in range(2, int(limit**0.5) + 1):
        if is_prime[i]:
            is_prime[i * i :: i] = bytes(len(range(i * i, limit, i)))
    return sum(is_prime)


def fn(input, headers):
    try:
        limit = int((input or "").strip())
    except ValueError:
        limit = DEFAULT
    if limit > MAXIMUM:
        raise ValueError(f"limit {limit} is above {MAXIMUM}")
    return f"Found {count_primes(limit)} primes under {limit}"
