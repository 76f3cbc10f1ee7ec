"""sieve: counts the primes below 10 000 with the sieve of Eratosthenes (tinyFaaS python3 format)."""

LIMIT = 10_000


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
    return f"Found {count_primes(LIMIT)} primes under {LIMIT}"
