# The Python take-home consumer: run with the python of a venv the package
# `turnstile` was pip-installed into (tests/take_home/python.sh), it takes the
# lock "take-home/python" (waiting at most 20 s), prints its fencing token
# and releases it.
import turnstile

with turnstile.Client("127.0.0.1:7400") as client:
    with client.acquire("take-home/python", wait_timeout=20, owner="take-home consumer") as lock:
        print("fencing_token=%d" % lock.fencing_token)
