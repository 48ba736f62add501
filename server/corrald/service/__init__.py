"""The gRPC surface: conversion, one error table, auth, and thin servicers."""
