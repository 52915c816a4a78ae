#!/usr/bin/env python3
"""Disk full (API.md, Server): a write that cannot be made durable answers
507 insufficient_storage, nothing acknowledged is lost, reads and queries
keep working, and once space is freed writes and indexing resume without a
restart. The test mounts a small tmpfs of its own (needs root; skipped
otherwise). Run: python3 test_disk_full.py --binary build/corvid
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from corvid_harness import CorvidServer, CorvidTestCase, doc_path, main  # noqa: E402


def mount_tmpfs(path, mib):
    return subprocess.run(['mount', '-t', 'tmpfs', '-o', 'size=%dm' % mib, 'tmpfs', path],
                          capture_output=True).returncode == 0


class DiskFullTest(CorvidTestCase):
    @classmethod
    def setUpClass(cls):
        pass  # each test starts its own server on its own small filesystem

    @classmethod
    def tearDownClass(cls):
        pass

    def setUp(self):
        self.mnt = tempfile.mkdtemp(prefix='corvid-disk-full-')
        if os.geteuid() != 0 or not mount_tmpfs(self.mnt, 24):
            os.rmdir(self.mnt)
            self.skipTest('cannot mount a tmpfs here (needs root)')
        self.addCleanup(lambda: (subprocess.run(['umount', '-l', self.mnt]), os.rmdir(self.mnt)))
        self.server = CorvidServer(data_dir=os.path.join(self.mnt, 'data'))
        self.server.start()
        self.addCleanup(self.server.cleanup)
        self.c = self.server.client()
        self.addCleanup(lambda: self.c.close())

    def test_full_disk_answers_507_and_loses_nothing(self):
        c = 'full'
        resp = self.c.put('/indexes/full_search', json.dumps(
            {'type': 'search', 'collection': c, 'fields': {'t': {'type': 'text'}}}))
        self.assertStatus(resp, 201)
        acked, refused = {}, 0
        for i in range(20000):
            # Random hex: nothing to compress, so the disk fills.
            body = json.dumps({'t': 'word%d common' % i, 'pad': os.urandom(1500).hex()})
            resp = self.c.put(doc_path(c, 'd%05d' % i), body)
            if resp.status in (200, 201):
                acked['d%05d' % i] = (resp.json['etag'], body)
                continue
            self.assertError(resp, 507, 'insufficient_storage')
            self.assertIn('durable', resp.json['error']['message'])
            refused += 1
            if refused >= 50:
                break
        self.assertGreaterEqual(refused, 50, 'the 24 MiB disk never filled')
        self.assertGreater(len(acked), 100)
        # Nothing acknowledged is lost; reads and queries go on.
        for i, (etag, body) in acked.items():
            resp = self.c.get(doc_path(c, i))
            self.assertStatus(resp, 200)
            self.assertEqual(resp.body.decode(), body)
        counts = {e['name']: e for e in self.c.get('/collections').json['collections']}
        self.assertEqual(counts[c]['count'], len(acked))
        resp = self.c.get('/indexes/full_search/search?q=common&limit=1')
        self.assertStatus(resp, 200)
        self.assertStatus(self.c.get('/health'), 200)
        # Space comes back: writes and indexing resume without a restart.
        self.assertEqual(subprocess.run(['mount', '-o', 'remount,size=64m', self.mnt]).returncode, 0)
        body = json.dumps({'t': 'after the disk was freed'})
        resp = self.c.put(doc_path(c, 'after'), body)
        self.assertStatus(resp, 201)
        etag = resp.json['etag']
        resp = self.c.get('/indexes/full_search/search?q=freed&minEtag=%d&waitMs=30000' % etag)
        self.assertStatus(resp, 200)
        self.assertFalse(resp.json['stale'], resp.describe())
        self.assertEqual(resp.json['total'], 1, resp.describe())
        total = self.c.get('/indexes/full_search/search?q=common&limit=1&minEtag=%d&waitMs=30000' % etag).json
        self.assertEqual(total['total'], len(acked))
        self.assertEqual(self.server.stop(), 0)


if __name__ == '__main__':
    main()
