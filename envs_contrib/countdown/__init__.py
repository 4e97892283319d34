"""Countdown: reach a target number with + - * / over given numbers (a community env example)."""
