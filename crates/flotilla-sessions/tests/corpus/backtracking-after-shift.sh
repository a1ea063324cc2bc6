echo $((1<<2))
((((((((((((((((((((((((((((((((git push origin HEAD:refs/heads/pwned