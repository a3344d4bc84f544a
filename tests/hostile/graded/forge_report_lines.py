"""Prints lines shaped like the harness's report (ready, a passed case each, the end
sentinel) under guessed nonces. Only lines with this run's nonce count, and the harness
writes them, not the program: its output is just wrong output."""

# problem: stdio
# outcome: failed
for nonce in ("", "0" * 32, "f" * 32, "nonce"):
    print(nonce, "ready 2")
    for i in range(2):
        print(nonce, "case", f'{{"i": {i}, "status": "passed"}}')
    print(nonce, "end 2")
print("PASSED")
