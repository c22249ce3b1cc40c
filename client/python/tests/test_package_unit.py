"""The package's import surface, with no server: one import name
(`turnstile`) exporting the client, election and multi-lock API, the
asyncio client (turnstile.aio) inside it, the generated stubs inside it
(turnstile.v1), and the version of pyproject.toml.

    PYTHONPATH=build/python /usr/bin/python3 -m unittest discover -s client/python/tests
"""
import os
import re
import unittest

import turnstile

HERE = os.path.dirname(os.path.abspath(__file__))


class PackageTest(unittest.TestCase):
    def test_every_exported_name_exists(self):
        for name in turnstile.__all__:
            self.assertTrue(hasattr(turnstile, name), name)
        for name in ("Client", "Lock", "TurnstileError", "Election", "MultiLock",
                     "acquire_all", "tls_credentials", "HELD", "LEADER"):
            self.assertIn(name, turnstile.__all__)

    def test_names_are_the_modules_own(self):
        from turnstile import client, election, multilock
        self.assertIs(turnstile.Client, client.Client)
        self.assertIs(turnstile.Election, election.Election)
        self.assertIs(turnstile.acquire_all, multilock.acquire_all)

    def test_stubs_are_inside_the_package(self):
        from turnstile.v1 import lock_pb2, lock_pb2_grpc
        self.assertEqual(lock_pb2.DESCRIPTOR.package, "turnstile.v1")
        self.assertTrue(hasattr(lock_pb2_grpc, "LockServiceStub"))
        pb2, pb2_grpc = turnstile.load_stubs()
        self.assertIs(pb2, lock_pb2)
        self.assertIs(pb2_grpc, lock_pb2_grpc)
        # The generated gRPC module refers to the messages by their
        # package path, so the two must be the same module object.
        self.assertTrue(lock_pb2.__name__ == "turnstile.v1.lock_pb2")
        token = lock_pb2.Acquired(fencing_token=42).SerializeToString()
        self.assertEqual(lock_pb2.Acquired.FromString(token).fencing_token, 42)

    def test_the_contract_ships_with_its_stubs(self):
        import turnstile.v1
        path = os.path.join(os.path.dirname(turnstile.v1.__file__), "lock.proto")
        with open(path, encoding="utf-8") as f:
            self.assertIn("service LockService", f.read())

    def test_no_environment_is_read_for_the_stubs(self):
        with open(turnstile.client.__file__, encoding="utf-8") as f:
            self.assertNotIn("TURNSTILE_PY_STUBS", f.read())

    def test_version_is_pyprojects(self):
        path = os.path.join(HERE, "..", "pyproject.toml")
        with open(path, encoding="utf-8") as f:
            m = re.search(r'^version = "([^"]+)"', f.read(), re.M)
        self.assertIsNotNone(m)
        self.assertEqual(turnstile.__version__, m.group(1))

    def test_the_asyncio_client_ships_in_the_package(self):
        import turnstile.aio
        for name in turnstile.aio.__all__:
            self.assertTrue(hasattr(turnstile.aio, name), name)
        # One error type and one set of states for both clients.
        self.assertIs(turnstile.aio.TurnstileError, turnstile.TurnstileError)
        self.assertEqual(turnstile.aio.HELD, turnstile.HELD)
        # pip installs only the packages pyproject.toml lists.
        path = os.path.join(HERE, "..", "pyproject.toml")
        with open(path, encoding="utf-8") as f:
            m = re.search(r'^packages = \[([^\]]*)\]', f.read(), re.M)
        self.assertIsNotNone(m)
        self.assertIn('"turnstile.aio"', m.group(1))

    def test_default_target_is_the_documented_address(self):
        import inspect
        sig = inspect.signature(turnstile.Client.__init__)
        self.assertEqual(sig.parameters["target"].default, "127.0.0.1:7400")


if __name__ == "__main__":
    unittest.main()
